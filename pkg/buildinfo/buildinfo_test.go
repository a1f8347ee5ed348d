package buildinfo

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/version"
)

func TestCollectorServesTheVersion(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "gpuscale_build_info" {
		t.Fatalf("gathered %v, want one gpuscale_build_info family", mfs)
	}
	m := mfs[0].GetMetric()
	if len(m) != 1 || m[0].GetGauge().GetValue() != 1 {
		t.Fatalf("gpuscale_build_info = %v, want one series of value 1", m)
	}
	labels := map[string]string{}
	for _, l := range m[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	for _, tc := range []struct{ name, want string }{
		{"version", Version()},
		{"revision", version.GetRevision()},
		{"goversion", version.GoVersion},
	} {
		if labels[tc.name] != tc.want || tc.want == "" {
			t.Errorf("label %s = %q, want %q (non-empty)", tc.name, labels[tc.name], tc.want)
		}
	}
	if n := testutil.CollectAndCount(Collector()); n != 1 {
		t.Errorf("CollectAndCount = %d, want 1", n)
	}
}

func TestUnstampedBuildNamesAVersion(t *testing.T) {
	// go test links no -X flag: init must still have filled it in.
	if Version() == "" {
		t.Fatal("Version() is empty in an unstamped build")
	}
	out := Print("exporter")
	for _, want := range []string{"exporter, version " + Version(), "go version:"} {
		if !strings.Contains(out, want) {
			t.Errorf("Print = %q, want it to contain %q", out, want)
		}
	}
}
