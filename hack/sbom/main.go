// Command sbom writes an SPDX 2.3 JSON software bill of materials for one
// gpuscale image: the Go modules linked into its binary, read from the
// build information the Go linker embeds (the module graph as built, with
// replacements applied), the Go standard library, the binary's SHA-256,
// and the Debian packages its base holds (hack/images.sh passes the .deb
// files apt downloaded, with the SHA-256 apt verified). Its output is a
// pure function of its inputs: the same build gives the same bytes.
//
//	go run ./hack/sbom --binary _output/bin/linux_amd64/adapter --name gpuscale-adapter \
//	  --version 0.2.0 --arch amd64 --created 2026-12-01T10:00:00Z \
//	  --deb libc6_2.36-9+deb12u13_amd64.deb=SHA256 > adapter.spdx.json
package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime/debug"
	"sort"
	"strings"
)

type debFlags []string

func (d *debFlags) String() string     { return strings.Join(*d, ",") }
func (d *debFlags) Set(v string) error { *d = append(*d, v); return nil }

func main() {
	var (
		o    Options
		debs debFlags
	)
	flag.StringVar(&o.Binary, "binary", "", "the image's binary")
	flag.StringVar(&o.Name, "name", "", "the image's name, e.g. gpuscale-adapter")
	flag.StringVar(&o.Version, "version", "", "the image's version")
	flag.StringVar(&o.Arch, "arch", "", "GOARCH of the image")
	flag.StringVar(&o.Created, "created", "", "RFC 3339 time of the build (the commit's)")
	flag.Var(&debs, "deb", "a base package: FILE.deb=SHA256 (repeatable)")
	flag.Parse()
	for _, d := range debs {
		p, err := parseDeb(d)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sbom:", err)
			os.Exit(2)
		}
		o.Debs = append(o.Debs, p)
	}
	if err := write(os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
}

// Options say what the SBOM is of.
type Options struct {
	Binary, Name, Version, Arch, Created string
	Debs                                 []Deb
}

// Deb is a Debian package of the image's base.
type Deb struct{ Name, Version, Arch, SHA256 string }

// parseDeb reads NAME_VERSION_ARCH.deb=SHA256, as apt names its files
// (the version URL-encoded: %3a for an epoch's colon).
func parseDeb(s string) (Deb, error) {
	file, sum, ok := strings.Cut(s, "=")
	parts := strings.Split(strings.TrimSuffix(file, ".deb"), "_")
	if !ok || len(parts) != 3 || len(sum) != 64 {
		return Deb{}, fmt.Errorf("--deb %q: want NAME_VERSION_ARCH.deb=SHA256", s)
	}
	v, err := url.PathUnescape(parts[1])
	if err != nil {
		return Deb{}, err
	}
	return Deb{Name: parts[0], Version: v, Arch: parts[2], SHA256: sum}, nil
}

func write(w io.Writer, o Options) error {
	if o.Binary == "" || o.Name == "" || o.Version == "" || o.Arch == "" || o.Created == "" {
		return errors.New("--binary, --name, --version, --arch and --created are required")
	}
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return err
	}
	info, err := buildinfo.ReadFile(o.Binary)
	if err != nil {
		return fmt.Errorf("%s: %w", o.Binary, err)
	}
	sum := sha256.Sum256(bin)
	doc := Document(info, hex.EncodeToString(sum[:]), o)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// SPDX 2.3, as much of it as an image's bill of materials needs.
type (
	spdxDoc struct {
		SPDXVersion       string         `json:"spdxVersion"`
		DataLicense       string         `json:"dataLicense"`
		SPDXID            string         `json:"SPDXID"`
		Name              string         `json:"name"`
		DocumentNamespace string         `json:"documentNamespace"`
		CreationInfo      creationInfo   `json:"creationInfo"`
		Packages          []spdxPackage  `json:"packages"`
		Relationships     []relationship `json:"relationships"`
	}
	creationInfo struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	}
	spdxPackage struct {
		Name             string        `json:"name"`
		SPDXID           string        `json:"SPDXID"`
		VersionInfo      string        `json:"versionInfo,omitempty"`
		DownloadLocation string        `json:"downloadLocation"`
		FilesAnalyzed    bool          `json:"filesAnalyzed"`
		Purpose          string        `json:"primaryPackagePurpose,omitempty"`
		Checksums        []checksum    `json:"checksums,omitempty"`
		ExternalRefs     []externalRef `json:"externalRefs,omitempty"`
		Comment          string        `json:"comment,omitempty"`
	}
	checksum struct {
		Algorithm string `json:"algorithm"`
		Value     string `json:"checksumValue"`
	}
	externalRef struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	relationship struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
)

func purl(ref string) []externalRef {
	return []externalRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: ref}}
}

// Document is the SBOM of the image whose binary has info and SHA-256 sum.
func Document(info *debug.BuildInfo, sum string, o Options) spdxDoc {
	image := spdxPackage{Name: o.Name, SPDXID: "SPDXRef-Image", VersionInfo: o.Version, DownloadLocation: "NOASSERTION",
		Purpose: "CONTAINER", ExternalRefs: purl(fmt.Sprintf("pkg:oci/%s?tag=%s&arch=%s", o.Name, url.QueryEscape(o.Version), o.Arch))}
	binary := spdxPackage{Name: "/usr/local/bin/" + o.Name, SPDXID: "SPDXRef-Binary", VersionInfo: o.Version,
		DownloadLocation: "NOASSERTION", Purpose: "APPLICATION", Checksums: []checksum{{"SHA256", sum}},
		Comment: "built from " + info.Main.Path + " " + info.Path + " with " + info.GoVersion}
	doc := spdxDoc{SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              fmt.Sprintf("%s %s linux/%s", o.Name, o.Version, o.Arch),
		DocumentNamespace: fmt.Sprintf("https://github.com/gpuscale/gpuscale/sbom/%s/%s/linux-%s/%s", o.Name, o.Version, o.Arch, sum[:16]),
		CreationInfo:      creationInfo{Created: o.Created, Creators: []string{"Tool: gpuscale-hack-sbom", "Organization: gpuscale"}},
		Packages:          []spdxPackage{image, binary},
		Relationships: []relationship{{"SPDXRef-DOCUMENT", "DESCRIBES", "SPDXRef-Image"},
			{"SPDXRef-Image", "CONTAINS", "SPDXRef-Binary"}},
	}
	add := func(p spdxPackage, from, rel string) {
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, relationship{from, rel, p.SPDXID})
	}
	mainVersion := info.Main.Version
	if mainVersion == "" || mainVersion == "(devel)" {
		mainVersion = "v" + strings.TrimPrefix(o.Version, "v")
	}
	add(spdxPackage{Name: info.Main.Path, SPDXID: "SPDXRef-Go-main", VersionInfo: mainVersion, DownloadLocation: "https://" + info.Main.Path,
		Purpose: "SOURCE", ExternalRefs: purl("pkg:golang/" + info.Main.Path + "@" + mainVersion)}, "SPDXRef-Binary", "GENERATED_FROM")
	stdlib := strings.TrimPrefix(info.GoVersion, "go")
	add(spdxPackage{Name: "stdlib", SPDXID: "SPDXRef-Go-stdlib", VersionInfo: info.GoVersion, DownloadLocation: "https://go.dev/dl/",
		Purpose: "LIBRARY", ExternalRefs: purl("pkg:golang/stdlib@" + stdlib)}, "SPDXRef-Binary", "DEPENDS_ON")
	deps := append([]*debug.Module(nil), info.Deps...)
	sort.Slice(deps, func(i, j int) bool { return deps[i].Path < deps[j].Path })
	for i, m := range deps {
		mod := m
		comment := ""
		if m.Replace != nil {
			comment = "replaces " + m.Path + " " + m.Version
			mod = m.Replace
		}
		if mod.Sum != "" {
			comment = strings.TrimSpace(comment + " go.sum " + mod.Sum)
		}
		add(spdxPackage{Name: mod.Path, SPDXID: fmt.Sprintf("SPDXRef-Go-%d", i), VersionInfo: mod.Version,
			DownloadLocation: "https://proxy.golang.org/" + strings.ToLower(mod.Path) + "/@v/" + mod.Version + ".zip",
			Purpose:          "LIBRARY", ExternalRefs: purl("pkg:golang/" + mod.Path + "@" + mod.Version), Comment: comment}, "SPDXRef-Binary", "DEPENDS_ON")
	}
	for i, d := range o.Debs {
		add(spdxPackage{Name: d.Name, SPDXID: fmt.Sprintf("SPDXRef-Deb-%d", i), VersionInfo: d.Version, DownloadLocation: "NOASSERTION",
			Purpose: "OPERATING-SYSTEM", Checksums: []checksum{{"SHA256", d.SHA256}},
			ExternalRefs: purl(fmt.Sprintf("pkg:deb/debian/%s@%s?arch=%s", d.Name, url.QueryEscape(d.Version), d.Arch))}, "SPDXRef-Image", "CONTAINS")
	}
	return doc
}
