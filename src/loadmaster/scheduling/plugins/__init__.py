"""The built-in plugins, one small file each. Registration is explicit, in ``registry``."""
