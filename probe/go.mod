module github.com/sluicelb/sluice/probe

go 1.26.0

require (
	github.com/sluicelb/sluice/api v0.0.0
	go.uber.org/goleak v1.3.0
)

require (
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)

replace github.com/sluicelb/sluice/api => ../api
