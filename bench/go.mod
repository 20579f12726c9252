module github.com/sluicelb/sluice/bench

go 1.26.0
