module loadmaster/tools/openb-draws

go 1.19
