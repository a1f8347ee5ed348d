package main

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSBOMFromTheModuleGraph: the SBOM of a binary built here lists every
// module its build information records, under its purl, plus the standard
// library and the base's Debian packages, and two runs give the same bytes.
func TestSBOMFromTheModuleGraph(t *testing.T) {
	// A binary of this module that links a few dependencies.
	bin := filepath.Join(t.TempDir(), "inferencesim")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/inferencesim")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	deb := "libc6_2.36-9%2bdeb12u13_amd64.deb=" + strings.Repeat("ab", 32)
	d, err := parseDeb(deb)
	if err != nil || d.Version != "2.36-9+deb12u13" || d.Arch != "amd64" {
		t.Fatalf("parseDeb: %+v %v", d, err)
	}
	o := Options{Binary: bin, Name: "gpuscale-inferencesim", Version: "0.2.0", Arch: "amd64", Created: "2026-12-01T10:00:00Z", Debs: []Deb{d}}
	var a, b bytes.Buffer
	if err := write(&a, o); err != nil {
		t.Fatal(err)
	}
	if err := write(&b, o); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two SBOMs of one build differ")
	}
	var doc spdxDoc
	if err := json.Unmarshal(a.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	purls := map[string]bool{}
	for _, p := range doc.Packages {
		for _, r := range p.ExternalRefs {
			purls[r.Locator] = true
		}
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Deps) < 5 {
		t.Fatalf("the binary records %d modules", len(info.Deps))
	}
	for _, m := range info.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		if !purls["pkg:golang/"+m.Path+"@"+m.Version] {
			t.Errorf("the SBOM lacks %s %s", m.Path, m.Version)
		}
	}
	for _, want := range []string{"pkg:golang/stdlib@" + strings.TrimPrefix(info.GoVersion, "go"), "pkg:deb/debian/libc6@2.36-9%2Bdeb12u13?arch=amd64",
		"pkg:oci/gpuscale-inferencesim?tag=0.2.0&arch=amd64"} {
		if !purls[want] {
			t.Errorf("the SBOM lacks %s", want)
		}
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.CreationInfo.Created != o.Created || len(doc.Relationships) != len(doc.Packages) {
		t.Errorf("document header %+v, %d relationships for %d packages", doc.CreationInfo, len(doc.Relationships), len(doc.Packages))
	}
}
