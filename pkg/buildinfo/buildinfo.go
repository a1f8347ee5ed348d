// Package buildinfo is the version every gpuscale binary reports: by its
// --version flag and by a gpuscale_build_info series on its /metrics.
//
// The version is stamped at link time into prometheus/common's version
// package, as Prometheus' own binaries do (hack/images.sh, the release
// workflow):
//
//	-ldflags "-X github.com/prometheus/common/version.Version=v0.2.0
//	          -X github.com/prometheus/common/version.Revision=<commit>
//	          -X github.com/prometheus/common/version.Branch=<branch>
//	          -X github.com/prometheus/common/version.BuildDate=<RFC 3339>"
package buildinfo

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/version"
)

// Namespace makes the series gpuscale_build_info on every binary, so one
// query finds the version of each adapter, exporter and simulator.
const Namespace = "gpuscale"

func init() {
	// An unstamped build (go build, go run, go install) still names
	// something: the module version go install records, or "(devel)".
	if version.Version == "" {
		version.Version = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			version.Version = bi.Main.Version
		}
	}
}

// Version is the stamped version.
func Version() string { return version.Version }

// Print is the --version output of program: version, revision, branch,
// build date and Go version.
func Print(program string) string { return version.Print(program) }

// Collector serves gpuscale_build_info{version, revision, branch,
// goversion, goos, goarch, tags} 1.
func Collector() prometheus.Collector { return versioncollector.NewCollector(Namespace) }
