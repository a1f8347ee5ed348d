package dashboards

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink matches a Markdown link's target; mdPath a backquoted relative
// path that climbs out of its directory.
var (
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdPath = regexp.MustCompile("`(\\.\\./[^`\\s]*)`")
)

// TestDocsStayInRepository: every relative link and every backquoted
// ../ path in the project's Markdown names a file inside the repository
// that exists, so a reader of a clone can follow each one.
func TestDocsStayInRepository(t *testing.T) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "_output" || d.Name() == "node_modules") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		rel, _ := filepath.Rel(root, path)
		var targets []string
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			targets = append(targets, m[1])
		}
		for _, m := range mdPath.FindAllStringSubmatch(string(b), -1) {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, _, _ := strings.Cut(target, "#")
			full := filepath.Clean(filepath.Join(filepath.Dir(path), file))
			if filepath.IsAbs(file) || !strings.HasPrefix(full, root+string(filepath.Separator)) {
				t.Errorf("%s: %s points outside the repository", rel, target)
				continue
			}
			if _, err := os.Stat(full); err != nil {
				t.Errorf("%s: %s does not exist", rel, target)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 {
		t.Fatalf("found %d Markdown files; is repoRoot right?", n)
	}
}
