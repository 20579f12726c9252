module github.com/sluicelb/sluice/scheduler

go 1.26
