//go:build tools

// Package tools names the prometheus-adapter command
// hack/prometheus-adapter-build.sh builds, so that go.mod keeps every module
// it needs.
package tools

import (
	_ "sigs.k8s.io/prometheus-adapter/cmd/adapter"
)
