//go:build tools

// Package tools names the VictoriaMetrics command hack/victoriametrics-build.sh
// builds, so that go.mod keeps every module it needs.
package tools

import (
	_ "github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics"
)
