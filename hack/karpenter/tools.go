//go:build tools

// Package tools pins Karpenter's KWOK provider (sigs.k8s.io/karpenter/kwok, a main package) in
// this module's go.mod, so that hack/karpenter.sh builds that release with the dependency
// versions recorded here: `go build sigs.k8s.io/karpenter/kwok`.
package tools

import _ "sigs.k8s.io/karpenter/kwok"
