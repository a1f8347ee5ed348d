package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A module shaped as KEDA's: a builder whose switch names trigger types,
// and a scalers package with one file per scaler.
var fakeKEDA = map[string]string{
	"go.mod": "module example.com/keda\n",
	builderFile: `package scaling

import "example.com/keda/pkg/scalers"

func buildScaler(triggerType string) (scalers.Scaler, error) {
	// TRIGGERS-START
	switch triggerType {
	case "a":
		// a's comment stays with it
		return scalers.NewA()
	case "b", "c":
		return scalers.NewBC()
	case "d":
		return scalers.NewD()
	default:
		return nil, scalers.Unknown(triggerType)
	}
	// TRIGGERS-END
}
`,
	"pkg/scaling/scalers_builder_test.go": "package scaling\n",
	scalersDir + "/scaler.go":             "package scalers\n\ntype Scaler interface{}\n\nfunc Unknown(string) error { return nil }\n",
	scalersDir + "/a_scaler.go":           "package scalers\n\nfunc NewA() (Scaler, error) { _ = metricType; return nil, nil }\n",
	scalersDir + "/a_scaler_test.go":      "package scalers\n",
	scalersDir + "/bc_scaler.go":          "package scalers\n\ntype bc struct{}\n\nfunc NewBC() (Scaler, error) { var b bc; b.parse(); return nil, nil }\n",
	// A constant a kept scaler uses, declared beside a scaler not kept.
	scalersDir + "/e_scaler.go": "package scalers\n\nconst metricType = \"External\"\n\nfunc NewE() (Scaler, error) { return nil, nil }\n",
	// A method on a kept scaler's type, in another scaler's file.
	scalersDir + "/g_scaler.go":     "package scalers\n\nfunc (bc) parse() {}\n\nfunc NewG() (Scaler, error) { return nil, nil }\n",
	scalersDir + "/d_scaler.go":     "package scalers\n\nfunc NewD() (Scaler, error) { return nil, nil }\n",
	scalersDir + "/azure/client.go": "package azure\n",
}

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// switchCases lists the trigger types of the trimmed builder's cases, and
// whether it kept a default case.
func switchCases(t *testing.T, path string) (types []string, hasDefault bool) {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatalf("the trimmed builder does not parse: %v", err)
	}
	sw, err := triggerSwitch(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range sw.Body.List {
		clause := stmt.(*ast.CaseClause)
		if clause.List == nil {
			hasDefault = true
		}
		for _, e := range clause.List {
			s, _ := strconv.Unquote(e.(*ast.BasicLit).Value)
			types = append(types, s)
		}
	}
	return types, hasDefault
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestTrim(t *testing.T) {
	src := writeTree(t, fakeKEDA)
	out := filepath.Join(t.TempDir(), "keda")
	kept, err := Trim(src, out, []string{"c", " a"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "c"}; !slices.Equal(kept.Triggers, want) {
		t.Errorf("kept triggers %v, want %v", kept.Triggers, want)
	}
	if want := []string{"a_scaler.go", "bc_scaler.go", "e_scaler.go", "g_scaler.go"}; !slices.Equal(kept.Files, want) {
		t.Errorf("kept files %v, want %v", kept.Files, want)
	}
	types, hasDefault := switchCases(t, filepath.Join(out, builderFile))
	if want := []string{"a", "c"}; !slices.Equal(types, want) || !hasDefault {
		t.Errorf("the trimmed switch has cases %v (default %v), want %v and a default", types, hasDefault, want)
	}
	builder, _ := os.ReadFile(filepath.Join(out, builderFile))
	if !strings.Contains(string(builder), "a's comment stays with it") || !strings.Contains(string(builder), "TRIGGERS-END") {
		t.Errorf("the trimmed builder lost the kept code's comments:\n%s", builder)
	}
	for name, want := range map[string]bool{
		"go.mod":                              true,
		scalersDir + "/scaler.go":             true,
		scalersDir + "/a_scaler.go":           true,
		scalersDir + "/bc_scaler.go":          true,
		scalersDir + "/azure/client.go":       true, // other packages are left to the build
		scalersDir + "/d_scaler.go":           false,
		scalersDir + "/a_scaler_test.go":      false,
		"pkg/scaling/scalers_builder_test.go": false,
	} {
		if got := exists(filepath.Join(out, name)); got != want {
			t.Errorf("%s in the copy: %v, want %v", name, got, want)
		}
	}
	if !exists(filepath.Join(src, scalersDir, "d_scaler.go")) {
		t.Error("the source folder was changed")
	}
	if err := os.WriteFile(filepath.Join(out, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Errorf("the copy is not writable: %v", err)
	}
}

func TestTrimRefuses(t *testing.T) {
	src := writeTree(t, fakeKEDA)
	noConstructor := writeTree(t, map[string]string{
		builderFile:               strings.Replace(fakeKEDA[builderFile], "scalers.NewA()", "scalers.NewGone()", 1),
		scalersDir + "/scaler.go": fakeKEDA[scalersDir+"/scaler.go"],
	})
	existing := t.TempDir()
	for _, tc := range []struct {
		name     string
		src, out string
		triggers []string
		want     string
	}{
		{"an unknown trigger type", src, "", []string{"a", "zeta"}, "no case for trigger types zeta"},
		{"an empty trigger type", src, "", []string{"a", ""}, "empty trigger type"},
		{"an existing output folder", src, existing, []string{"a"}, "exists"},
		{"a folder that is not KEDA", t.TempDir(), "", []string{"a"}, "is not KEDA's module"},
		{"a constructor no file declares", noConstructor, "", []string{"a"}, "call scalers.NewGone, which no file declares"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := tc.out
			if out == "" {
				out = filepath.Join(t.TempDir(), "keda")
			}
			_, err := Trim(tc.src, out, tc.triggers)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Trim: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
