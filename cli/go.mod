module github.com/sluicelb/sluice/cli

go 1.26
