package scrape

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"
)

// expfmtParse is what the fast path must agree with.
func expfmtParse(text []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(text))
}

// sameFamilies reports how got and want differ, "" if they do not.
func sameFamilies(got, want map[string]*dto.MetricFamily) string {
	for name, mf := range want {
		if !proto.Equal(got[name], mf) {
			return fmt.Sprintf("%s: fast %v, expfmt %v", name, got[name], mf)
		}
	}
	for name := range got {
		if want[name] == nil {
			return fmt.Sprintf("%s: only the fast path has it", name)
		}
	}
	return ""
}

// realExpositions are what servers and exporters send, which the fast
// path must take whole (not leave to expfmt): the trimmed vLLM fixture, a
// loaded simulated vLLM, the other inference dialects and DCGM exporters
// of both schemas.
func realExpositions(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{"vllm.prom": readTestdata(t, "vllm.prom"), "simulated vLLM": simulatedVLLM(t)}
	for _, dir := range []string{"../inference/testdata", "../ingest/testdata"} {
		files, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if filepath.Ext(f) == ".om" || bytes.Contains([]byte(f), []byte("openmetrics")) {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				if os.IsNotExist(err) {
					continue
				}
				continue // a folder
			}
			out[filepath.Base(f)] = b
		}
	}
	return out
}

// TestTextFastTakesRealExpositions: every real exposition is parsed by
// the fast path, to exactly expfmt's families.
func TestTextFastTakesRealExpositions(t *testing.T) {
	exps := realExpositions(t)
	if len(exps) < 8 {
		t.Fatalf("%d expositions found, want the testdata of three packages", len(exps))
	}
	for name, body := range exps {
		t.Run(name, func(t *testing.T) {
			want, err := expfmtParse(body)
			if err != nil {
				t.Skipf("not the text format (expfmt: %v)", err)
			}
			got, ok := parseTextFast(body, newArena())
			if !ok {
				t.Fatal("the fast path left a real exposition to expfmt")
			}
			if diff := sameFamilies(got, want); diff != "" {
				t.Fatal(diff)
			}
		})
	}
}

// TestTextFastShapes: text in other shapes goes to expfmt, which decides;
// text in the fast path's shape gives expfmt's families, edge cases
// included.
func TestTextFastShapes(t *testing.T) {
	cases := []struct {
		name string
		in   string
		fast bool
	}{
		{"gauge", "# HELP g help text\n# TYPE g gauge\ng{a=\"1\",b=\"2\"} 3\n", true},
		{"untyped with timestamp", "u 1 1700000000000\n", true},
		{"empty braces and a trailing comma", "u{} 1\nv{a=\"x\",} 2\n", true},
		{"blank lines and comments", "\n# just a comment\n\nu 1\n", true},
		{"histogram with fractional counts", "# TYPE h histogram\nh_bucket{le=\"1\"} 0.5\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n", true},
		{"histogram series interleaved, labels reordered", "# TYPE h histogram\nh_bucket{m=\"a\",le=\"1\"} 1\nh_bucket{le=\"1\",m=\"b\"} 2\nh_bucket{m=\"a\",le=\"+Inf\"} 3\nh_count{m=\"b\"} 2\nh_sum{m=\"a\"} 1\n", true},
		{"histogram lines before TYPE are a family of their own", "h_bucket{le=\"1\"} 1\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\n", true},
		{"NaN, infinities", "a NaN\nb +Inf\nc -Inf\n", true},
		{"help after samples", "g 1\n# HELP g late\n", true},
		{"escaped label value", "g{a=\"x\\\"y\"} 1\n", false},
		{"escaped help", "# HELP g a\\nb\ng 1\n", false},
		{"summary", "# TYPE s summary\ns{quantile=\"0.5\"} 1\ns_sum 1\ns_count 1\n", false},
		{"quoted name", "{\"a.b\"} 1\n", false},
		{"no final newline", "g 1", false},
		{"two spaces", "g  1\n", false},
		{"upper-case type", "# TYPE g GAUGE\ng 1\n", false},
		{"second TYPE", "# TYPE g gauge\n# TYPE g gauge\ng 1\n", false},
		{"TYPE after samples", "g 1\n# TYPE g gauge\n", false},
		{"duplicate label", "g{a=\"1\",a=\"2\"} 1\n", false},
		{"bad value", "g 1x\n", false},
		{"bad le on a sum", "# TYPE h histogram\nh_sum{le=\"x\"} 1\n", false},
		{"negative bucket", "# TYPE h histogram\nh_bucket{le=\"1\"} -1.5\n", false},
		{"carriage return", "g 1\r\n", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, werr := expfmtParse([]byte(c.in))
			got, ok := parseTextFast([]byte(c.in), newArena())
			if ok != c.fast {
				t.Fatalf("fast path taken: %v, want %v", ok, c.fast)
			}
			if !ok {
				return
			}
			if werr != nil {
				t.Fatalf("fast path accepted what expfmt refuses: %v", werr)
			}
			if diff := sameFamilies(got, want); diff != "" {
				t.Fatal(diff)
			}
		})
	}
}

// FuzzTextFast: wherever the fast path parses, expfmt parses the same
// text to the same families; an arena reused from another parse changes
// nothing.
func FuzzTextFast(f *testing.F) {
	f.Add(readTestdata(f, "vllm.prom"), []byte("g{a=\"1\"} 2\n"))
	f.Add([]byte("# HELP g x\n# TYPE g gauge\ng{a=\"1\",b=\"2\"} 3 17\n"), []byte("u 1\n"))
	f.Add([]byte("# TYPE h histogram\nh_bucket{m=\"a\",le=\"1\"} 1\nh_sum{m=\"a\"} 1\nh_count{m=\"a\"} 1\n"), []byte("# TYPE h histogram\nh_bucket{le=\"2\"} 3\n"))
	f.Add([]byte("a{b=\"c\"} 1 2\n# HELP a x\n"), []byte(""))
	f.Fuzz(func(t *testing.T, data, before []byte) {
		a := newArena()
		if _, ok := parseTextFast(before, a); ok {
			a.reset()
		} else {
			a.resetParse()
		}
		got, ok := parseTextFast(data, a)
		if !ok {
			return
		}
		want, err := expfmtParse(data)
		if err != nil {
			t.Fatalf("fast path accepted what expfmt refuses: %v", err)
		}
		if diff := sameFamilies(got, want); diff != "" {
			t.Fatal(diff)
		}
	})
}

// TestTextFastAllocatesNothing: once a worker's arena has grown to its
// scrapes' size, parsing the selected families of a loaded vLLM's
// exposition allocates nothing: no allocation per sample, nor per scrape.
func TestTextFastAllocatesNothing(t *testing.T) {
	sel := NewFamilies([]string{"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
		"vllm:time_to_first_token_seconds", "vllm:request_prefill_time_seconds"}, []string{"vllm:"})
	text, err := (&familyFilter{src: getBuf(&bufPool, bytes.NewReader(simulatedVLLM(t))), sel: sel}).collect(nil)
	if err != nil {
		t.Fatal(err)
	}
	a := newArena()
	parse := func() {
		fams, ok := parseTextFast(text, a)
		if !ok || fams["vllm:time_to_first_token_seconds"] == nil || fams["vllm:request_prefill_time_seconds"] == nil {
			t.Fatalf("fast path %v, %d families", ok, len(fams))
		}
		a.reset()
	}
	parse() // the arena grows to size
	if n := testing.AllocsPerRun(100, parse); n > 0 {
		t.Errorf("%.0f allocations per parse of %d bytes, want none", n, len(text))
	}
}

// TestTextFastRandomLines: expositions of random lines in and around the
// fast path's shape (HELP and TYPE of every type, histogram lines in and
// out of place, le and quantile labels, trailing commas, timestamps,
// counts past uint64) parse, wherever the fast path takes them, to
// expfmt's families, on an arena reused from the input before.
func TestTextFastRandomLines(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	names := []string{"g", "h", "h_bucket", "h_sum", "h_count", "c_total", "h_x", "s"}
	types := []string{"gauge", "counter", "histogram", "untyped", "summary"}
	vals := []string{"1", "0.5", "+Inf", "NaN", "-1", "3", "2.5", "1e3", "18446744073709551616", "0"}
	lnames := []string{"le", "a", "model_name", "quantile"}
	lvals := []string{"1", "+Inf", "0.5", "x", "", "y z"}
	n, acc := 0, 0
	a := newArena()
	for range 20_000 {
		var b []byte
		for range r.IntN(8) {
			switch r.IntN(6) {
			case 0:
				b = append(b, "# TYPE "+names[r.IntN(len(names))]+" "+types[r.IntN(len(types))]+"\n"...)
			case 1:
				b = append(b, "# HELP "+names[r.IntN(len(names))]+" some help\n"...)
			default:
				b = append(b, names[r.IntN(len(names))]...)
				if r.IntN(3) > 0 {
					b = append(b, '{')
					for i := range r.IntN(3) {
						if i > 0 {
							b = append(b, ',')
						}
						b = append(b, lnames[r.IntN(len(lnames))]+"=\""+lvals[r.IntN(len(lvals))]+"\""...)
					}
					if r.IntN(5) == 0 {
						b = append(b, ',')
					}
					b = append(b, '}')
				}
				b = append(b, ' ')
				b = append(b, vals[r.IntN(len(vals))]...)
				if r.IntN(5) == 0 {
					b = append(b, " 1700"...)
				}
				b = append(b, '\n')
			}
		}
		n++
		got, ok := parseTextFast(b, a)
		if ok {
			acc++
			want, err := expfmtParse(b)
			if err != nil {
				t.Fatalf("%q: fast accepted, expfmt: %v", b, err)
			}
			if d := sameFamilies(got, want); d != "" {
				t.Fatalf("%q: %s", b, d)
			}
			a.reset()
		} else {
			a.resetParse()
		}
	}
	if acc < n/2 {
		t.Errorf("%d of %d inputs took the fast path, want most: the generator no longer tests it", acc, n)
	}
}
