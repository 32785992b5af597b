module fakegpu.dev/hack/pause

go 1.26.0
