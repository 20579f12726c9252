module github.com/sluicelb/sluice/agent

go 1.26
