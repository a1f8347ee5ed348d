package containers

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildRecord is hack/images.sh's _output/images/build-record.json.
type buildRecord struct {
	Version string `json:"version"`
	Images  []struct {
		Name, Arch, Image, ID, Archive, ArchiveSHA256, SBOM string
		Base                                                struct {
			Image, ID, Layer string
			Debs             []struct{ File, SHA256 string }
		}
	} `json:"images"`
}

// TestSupplyChain: every image the build recorded is of its architecture
// (amd64 and arm64 alike: the arm64 exporter is an aarch64 ELF linked
// against an aarch64 loader the image holds), holds its SBOM, which names
// its base's packages and its binary's modules, and sits on the base the
// record pins by image ID and layer digest.
func TestSupplyChain(t *testing.T) {
	needEnv(t)
	b, err := os.ReadFile(filepath.Join(root, "_output/images/build-record.json"))
	if err != nil {
		t.Fatalf("the build record (make images): %v", err)
	}
	var rec buildRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("build-record.json: %v", err)
	}
	if len(rec.Images) < 3 || rec.Version != tag {
		t.Fatalf("build record of version %s holds %d images; want %s's three per architecture", rec.Version, len(rec.Images), tag)
	}
	for _, im := range rec.Images {
		t.Run(im.Name+"_"+im.Arch, func(t *testing.T) {
			if got := podmanOut(t, "image", "inspect", "--format", "{{.Architecture}} {{.Id}}", im.Image); got != im.Arch+" "+strings.TrimPrefix(im.ID, "sha256:") && got != im.Arch+" "+im.ID {
				t.Errorf("podman: %s %q, the record: %s %s", im.Image, got, im.Arch, im.ID)
			}
			if got := podmanOut(t, "image", "inspect", "--format", "{{.Id}} {{index .RootFS.Layers 0}}", im.Base.Image); got != strings.TrimPrefix(im.Base.ID, "sha256:")+" "+im.Base.Layer && got != im.Base.ID+" "+im.Base.Layer {
				t.Errorf("base %s is %q, the record pins %s %s", im.Base.Image, got, im.Base.ID, im.Base.Layer)
			}
			dir := t.TempDir()
			ctr := strings.TrimSpace(podmanOut(t, "create", "--arch", im.Arch, im.Image))
			defer podmanOut(t, "rm", ctr)
			podmanOut(t, "cp", ctr+":/usr/share/doc/gpuscale/sbom.spdx.json", filepath.Join(dir, "sbom.json"))
			podmanOut(t, "cp", ctr+":/usr/local/bin/"+im.Name, filepath.Join(dir, "bin"))
			inImage, err := os.ReadFile(filepath.Join(dir, "sbom.json"))
			if err != nil {
				t.Fatal(err)
			}
			beside, err := os.ReadFile(filepath.Join(root, im.SBOM))
			if err != nil || !bytes.Equal(inImage, beside) {
				t.Errorf("the image's SBOM is not the one beside its archive (%v)", err)
			}
			var doc struct {
				Packages []struct {
					Name         string
					ExternalRefs []struct{ ReferenceLocator string } `json:"externalRefs"`
				}
			}
			if err := json.Unmarshal(inImage, &doc); err != nil {
				t.Fatal(err)
			}
			purls := map[string]bool{}
			for _, p := range doc.Packages {
				for _, r := range p.ExternalRefs {
					purls[strings.SplitN(r.ReferenceLocator, "@", 2)[0]] = true
				}
			}
			for _, want := range []string{"pkg:golang/github.com/gpuscale/gpuscale", "pkg:golang/stdlib", "pkg:golang/github.com/prometheus/client_golang", "pkg:deb/debian/ca-certificates"} {
				if !purls[want] {
					t.Errorf("SBOM lacks %s", want)
				}
			}
			if im.Name == "gpuscale-exporter" && !purls["pkg:deb/debian/libc6"] {
				t.Error("the exporter's SBOM lacks its base's libc6")
			}
			f, err := elf.Open(filepath.Join(dir, "bin"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[im.Arch]
			if f.Machine != want {
				t.Errorf("the binary is for %v, the image for %s", f.Machine, im.Arch)
			}
			if interp := f.Section(".interp"); interp != nil {
				b, _ := interp.Data()
				loader := strings.TrimRight(string(b), "\x00")
				if err := exec.Command("podman", "cp", ctr+":"+loader, filepath.Join(dir, "loader")).Run(); err != nil {
					t.Errorf("the binary's loader %s is not in the image: %v", loader, err)
				}
			}
		})
	}
}

func podmanOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("podman", args...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+containersConf)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("podman %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}
