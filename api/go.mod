module github.com/sluicelb/sluice/api

go 1.26

require (
	go.yaml.in/yaml/v3 v3.0.5
	pgregory.net/rapid v1.3.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/google/go-cmp v0.7.0 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
)
