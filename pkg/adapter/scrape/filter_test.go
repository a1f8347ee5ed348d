package scrape

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// testFamilies selects as an inference reader would: two named families,
// and the first family of each dialect prefix.
var testFamilies = NewFamilies(
	[]string{"vllm:num_requests_waiting", "vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_bucket"},
	[]string{"vllm:", "tgi_"})

func parseText(t testing.TB, in string, sel *Families) (map[string]*dto.MetricFamily, error) {
	t.Helper()
	return decode(strings.NewReader(in), expfmt.FmtText, 1<<20, sel, nil)
}

func TestFamiliesSelect(t *testing.T) {
	long := strings.Repeat("x", 3*readBufSize)
	tests := []struct {
		name    string
		in      string
		want    []string // families parsed
		wantErr string
	}{{
		name: "real vLLM exposition",
		in:   string(readTestdata(t, "vllm.prom")),
		want: []string{"vllm:num_requests_waiting", "vllm:time_to_first_token_seconds",
			// the first vllm: family, which tells the dialect
			"vllm:num_requests_running"},
	}, {
		name: "histogram lines follow their TYPE line",
		in: "# HELP other_seconds x\n# TYPE other_seconds histogram\nother_seconds_bucket{le=\"1\"} 1\nother_seconds_bucket{le=\"+Inf\"} 2\nother_seconds_sum 3\nother_seconds_count 2\n" +
			"# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\nvllm:time_to_first_token_seconds_sum 3\nvllm:time_to_first_token_seconds_count 2\n",
		want: []string{"vllm:time_to_first_token_seconds"},
	}, {
		name: "untyped histogram lines are selected by their own name",
		in:   "vllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\nvllm:time_to_first_token_seconds_sum 3\nother_sum 1\n",
		// _sum goes along: it would belong to the histogram if one
		// had been declared anywhere.
		want: []string{"vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_sum"},
	}, {
		name: "histogram lines apart from their TYPE line",
		in:   "# TYPE vllm:time_to_first_token_seconds histogram\nother 1\nvllm:time_to_first_token_seconds_sum 3\nvllm:time_to_first_token_seconds_count 2\n",
		want: []string{"vllm:time_to_first_token_seconds"},
	}, {
		name: "a prefix marks one family only",
		in:   "tgi_a 1\ntgi_b 2\nvllm:x 1\nvllm:num_requests_waiting 4\nvllm:y 1\n",
		want: []string{"tgi_a", "vllm:num_requests_waiting", "vllm:x"},
	}, {
		name: "errors in skipped families are not parsed",
		in:   "# TYPE skipped gauge\nskipped{broken 1\nskipped NaNa\nvllm:num_requests_waiting 4\n",
		want: []string{"vllm:num_requests_waiting"},
	}, {
		name:    "errors in selected families fail",
		in:      "vllm:num_requests_waiting{broken 1\n",
		wantErr: "text format parsing error in line 1",
	}, {
		name:    "text that is no metric name reaches the parser",
		in:      "<html><body>502 Bad Gateway</body></html>\n",
		wantErr: "text format parsing error",
	}, {
		name: "quoted names are passed on",
		in:   "# TYPE \"gpu.util\" gauge\n{\"gpu.util\"} 97\nvllm:num_requests_waiting 4\n",
		want: []string{"gpu.util", "vllm:num_requests_waiting"},
	}, {
		name: "a skipped line longer than the read buffer",
		in:   "skipped{l=\"" + long + "\"} 1\nvllm:num_requests_waiting{l=\"x\"} 4\n",
		want: []string{"vllm:num_requests_waiting"},
	}, {
		// the limits cannot judge what they cannot see whole
		name:    "a selected line longer than the read buffer",
		in:      "skipped 1\nvllm:num_requests_waiting{l=\"" + long + "\"} 4\n",
		wantErr: "a line longer than",
	}, {
		name: "comments and blank lines",
		in:   "# just a comment\n\n   \nskipped 1\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 4\n",
		want: []string{"vllm:num_requests_waiting"},
	}, {
		// in a selected family; a skipped one is not read
		name:    "no final newline",
		in:      "skipped 1\nvllm:num_requests_waiting 4",
		wantErr: "unexpected end of input stream",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseText(t, tt.in, testFamilies)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(tt.want)
			slices.Sort(want)
			names := familyNames(got)
			slices.Sort(names)
			if !slices.Equal(names, want) {
				t.Fatalf("parsed %q, want %q", names, want)
			}
			all, err := parseText(t, tt.in, nil)
			if err != nil {
				return // the filter spared a broken family
			}
			for name, mf := range got {
				if !proto.Equal(mf, all[name]) {
					t.Errorf("%s differs from the unfiltered parse:\n%v\n%v", name, mf, all[name])
				}
			}
		})
	}
}

// FuzzFamilies checks the filter against the unfiltered parse: whatever
// the input, every selected family the full parse yields comes out the
// same, any other family holds only samples the full parse has, and a
// filtered parse fails only where the full parse fails too.
func FuzzFamilies(f *testing.F) {
	f.Add(readTestdata(f, "vllm.prom"))
	for _, s := range []string{
		"vllm:num_requests_waiting 4\n",
		"# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\nvllm:time_to_first_token_seconds_count 2\n",
		"# TYPE x gauge\nx 1\nx_bucket{le=\"1\"} 2\nvllm:num_requests_waiting 1\n",
		"tgi_a 1\n{\"tgi_b\"} 1\n",
		"A 0\n{\"A\"} 0\n",
		"vllm:num_requests_waiting 1\n{b=\"c\",\"vllm:num_requests_waiting\"} 2\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		all, errAll := parseText(t, string(data), nil)
		got, err := parseText(t, string(data), testFamilies)
		if err != nil {
			if errAll == nil {
				t.Fatalf("filtered parse failed where the full one did not: %v", err)
			}
			return
		}
		if errAll != nil {
			return // the error was in a skipped family
		}
		for name := range testFamilies.names {
			if !proto.Equal(got[name], all[name]) {
				t.Fatalf("%s: filtered %v, full %v", name, got[name], all[name])
			}
		}
		for name, mf := range got {
			if _, ok := testFamilies.names[name]; ok {
				continue
			}
			// A family nobody selected can come out partial: the lines
			// naming it as the filter reads names are skipped, those
			// naming it in a form the filter does not attribute (quoted,
			// anywhere in the braces) are passed on. It never gains a
			// sample the full parse lacks.
			for _, m := range mf.GetMetric() {
				if !slices.ContainsFunc(all[name].GetMetric(), func(o *dto.Metric) bool { return proto.Equal(m, o) }) {
					t.Fatalf("%s: filtered sample %v missing from the full parse %v", name, m, all[name])
				}
			}
		}
	})
}

// simulatedVLLM is a loaded simulated vLLM's exposition: every family a
// real vLLM has, and a minute of requests in its histograms.
func simulatedVLLM(b testing.TB) []byte {
	body, err := inferencesim.Snapshot(inferencesim.Options{Dialect: inferencesim.VLLM, Rate: 10, Seed: 1}, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkDecodeVLLM parses vLLM expositions whole and as the adapter
// reads them: the trimmed fixture, and a simulated server's full one.
func BenchmarkDecodeVLLM(b *testing.B) {
	bodies := []struct {
		name string
		body []byte
	}{{"fixture", readTestdata(b, "vllm.prom")}, {"simulated", simulatedVLLM(b)}}
	for _, in := range bodies {
		for _, bc := range []struct {
			name string
			sel  *Families
		}{{"all", nil}, {"selected", testFamilies}} {
			b.Run(in.name+"/"+bc.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(in.body)))
				for b.Loop() {
					if _, err := decode(bytes.NewReader(in.body), expfmt.FmtText, 1<<20, bc.sel, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
