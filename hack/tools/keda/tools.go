//go:build tools

// Package tools names the KEDA commands hack/keda-build.sh builds, so that
// go.mod keeps every module they need.
package tools

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
)
