package scrape

import (
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

func decodeOM(t *testing.T, in string) (map[string]*dto.MetricFamily, error) {
	t.Helper()
	return decode(strings.NewReader(in), expfmt.FmtOpenMetrics_1_0_0, 1<<20, nil, nil)
}

func TestOpenMetricsTranslation(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		check func(t *testing.T, fams map[string]*dto.MetricFamily)
	}{{
		name: "counter renamed to its samples, help and unit kept",
		in: "# HELP req Requests \\\"served\\\".\n# TYPE req counter\n# UNIT req requests\n" +
			"req_total{code=\"200\"} 5\nreq_created{code=\"200\"} 1.7e9\n# EOF\n",
		check: func(t *testing.T, fams map[string]*dto.MetricFamily) {
			mf := fams["req_total"]
			if mf.GetType() != dto.MetricType_COUNTER || mf.GetMetric()[0].GetCounter().GetValue() != 5 {
				t.Errorf("req_total = %v", mf)
			}
			if mf.GetHelp() != `Requests "served".` || mf.GetUnit() != "requests" {
				t.Errorf("help %q unit %q", mf.GetHelp(), mf.GetUnit())
			}
		},
	}, {
		name: "timestamp in seconds becomes milliseconds, exemplars dropped",
		in: "# TYPE a gauge\na 1 1520879607.789\n# TYPE b counter\n" +
			"b_total 2 # {trace_id=\"x y\"} 1 1520879607.7\nb_total{l=\"v\"} 3 1520879607 # {t=\"1\"} 2\n# EOF\n",
		check: func(t *testing.T, fams map[string]*dto.MetricFamily) {
			if ts := fams["a"].GetMetric()[0].GetTimestampMs(); ts != 1520879607789 {
				t.Errorf("a timestamp = %d", ts)
			}
			b := fams["b_total"].GetMetric()
			if len(b) != 2 || b[0].GetCounter().GetValue() != 2 || b[1].GetTimestampMs() != 1520879607000 {
				t.Errorf("b_total = %v", b)
			}
		},
	}, {
		name: "info, stateset and unknown map to text types",
		in: "# TYPE build info\nbuild_info{version=\"1\"} 1\n# TYPE mode stateset\nmode{mode=\"a\"} 1\n" +
			"# TYPE odd unknown\nodd 3\n# EOF\n",
		check: func(t *testing.T, fams map[string]*dto.MetricFamily) {
			for name, want := range map[string]dto.MetricType{
				"build_info": dto.MetricType_GAUGE, "mode": dto.MetricType_GAUGE, "odd": dto.MetricType_UNTYPED,
			} {
				if got := fams[name].GetType(); got != want || len(fams[name].GetMetric()) != 1 {
					t.Errorf("%s: type %v with %d series, want %v", name, got, len(fams[name].GetMetric()), want)
				}
			}
		},
	}, {
		name: "quoted UTF-8 names and label values with spaces, braces and hashes",
		in: "# TYPE \"my.count\" counter\n{\"my.count_total\",path=\"/a b} #\"} 7\n" +
			"# TYPE \"vllm:x\" gauge\n\"vllm:x\"{l=\"\\\"q\\\"\"} 1 2\n# EOF\n",
		check: func(t *testing.T, fams map[string]*dto.MetricFamily) {
			mf := fams["my.count_total"]
			if mf.GetType() != dto.MetricType_COUNTER || mf.GetMetric()[0].GetLabel()[0].GetValue() != "/a b} #" {
				t.Errorf("my.count_total = %v", mf)
			}
			if ts := fams["vllm:x"].GetMetric()[0].GetTimestampMs(); ts != 2000 {
				t.Errorf("vllm:x timestamp = %d", ts)
			}
		},
	}, {
		name: "histogram",
		in: "# TYPE h histogram\nh_bucket{le=\"0.1\"} 1\nh_bucket{le=\"+Inf\"} 3\nh_count 3\nh_sum 0.5\n" +
			"h_created 1.7e9\n# EOF\n",
		check: func(t *testing.T, fams map[string]*dto.MetricFamily) {
			h := fams["h"].GetMetric()[0].GetHistogram()
			if len(h.GetBucket()) != 2 || h.GetSampleCount() != 3 || h.GetSampleSum() != 0.5 {
				t.Errorf("h = %v", h)
			}
		},
	}, {
		name: "nothing after EOF is read",
		in:   "# TYPE a gauge\na 1\n# EOF\nthis is not read\n",
		check: func(t *testing.T, fams map[string]*dto.MetricFamily) {
			if len(fams) != 1 {
				t.Errorf("families: %v", familyNames(fams))
			}
		},
	}, {
		name:  "EOF without newline",
		in:    "# TYPE a gauge\na 1\n# EOF",
		check: func(*testing.T, map[string]*dto.MetricFamily) {},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fams, err := decodeOM(t, tt.in)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			tt.check(t, fams)
		})
	}
}

func TestOpenMetricsErrors(t *testing.T) {
	for name, in := range map[string]string{
		"missing EOF":         "# TYPE a gauge\na 1\n",
		"missing EOF no LF":   "# TYPE a gauge\na 1",
		"bad timestamp":       "a 1 x\n# EOF\n",
		"NaN timestamp":       "a 1 NaN\n# EOF\n",
		"line too long":       "a{l=\"" + strings.Repeat("x", readBufSize) + "\"} 1\n# EOF\n",
		"bad value":           "a one\n# EOF\n",
		"bad type":            "# TYPE a wrong\na 1\n# EOF\n",
		"unterminated quote":  "# TYPE \"a gauge\n# EOF\n",
		"garbage":             "\x00\x01\x02\n# EOF\n",
		"trailing after name": "# HELP \"a\"x y\n# TYPE \"a\"x counter\n# EOF\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := decodeOM(t, in)
			if Reason(err) != ReasonParse {
				t.Errorf("err = %v, want a parse error", err)
			}
		})
	}
}
