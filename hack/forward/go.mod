module fakegpu.dev/hack/forward

go 1.26.0
