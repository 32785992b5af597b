module fakegpu.dev/hack/nvml-check

go 1.26.0

require (
	github.com/NVIDIA/go-nvlib v0.13.0
	github.com/NVIDIA/go-nvml v0.13.4-1
	gopkg.in/yaml.v3 v3.0.1
)

require github.com/google/uuid v1.6.0 // indirect
