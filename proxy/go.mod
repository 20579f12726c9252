module github.com/sluicelb/sluice/proxy

go 1.26
