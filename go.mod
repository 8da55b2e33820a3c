module github.com/gorun/gorun

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/NVIDIA/go-nvml v0.13.3-1
	github.com/hashicorp/go-hclog v1.6.3
	github.com/hashicorp/go-plugin v1.8.0
	github.com/kevinburke/ssh_config v1.6.0
	github.com/urfave/cli/v2 v2.27.7
	golang.org/x/crypto v0.58.0
	golang.org/x/sys v0.49.0
	google.golang.org/grpc v1.61.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/fatih/color v1.13.0 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/hashicorp/yamux v0.1.2 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.17 // indirect
	github.com/oklog/run v1.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20231106174013-bbf56f31fb17 // indirect
	google.golang.org/protobuf v1.36.6 // indirect
)

// Two modules are built from third_party/ (docs/building.md, "go install
// and make build"): go-nvml with one added cgo line that silences the C
// compiler's warnings about NVML functions NVIDIA deprecated, and a
// stand-in for go-md2man, so that urfave/cli links no blackfriday.
// scripts/third-party-check.sh holds each to its upstream.
replace github.com/NVIDIA/go-nvml v0.13.3-1 => ./third_party/go-nvml

replace github.com/cpuguy83/go-md2man/v2 v2.0.7 => ./third_party/go-md2man
