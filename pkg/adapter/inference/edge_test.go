package inference

import (
	"errors"
	"testing"
)

const ttftTwoEngines = `# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="0.1"} 4
vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="1"} 9
vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="+Inf"} 10
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 2.5
vllm:time_to_first_token_seconds_bucket{engine="1",model_name="m",le="0.1"} 1
vllm:time_to_first_token_seconds_bucket{engine="1",model_name="m",le="1"} 5
vllm:time_to_first_token_seconds_bucket{engine="1",model_name="m",le="+Inf"} 6
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 6
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 1.5
`

func TestDetectEdgeCases(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want want
	}{
		{
			name: "data-parallel engines sum, average and merge",
			in: `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3
vllm:num_requests_waiting{engine="1",model_name="m"} 4
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
` + ttftTwoEngines,
			want: want{
				dialect: VLLM, model: "m", queue: ptr(7), kv: ptr(37.5),
				ttft: &ttftWant{bounds: 3, count: 16, sum: 4, le: 1, leCount: 14},
			},
		},
		{
			name: "models joined sorted",
			in: `vllm:num_requests_waiting{model_name="zeta"} 1
vllm:num_requests_waiting{model_name="alpha"} 2
vllm:num_requests_waiting 3
`,
			want: want{dialect: VLLM, model: "alpha,zeta", queue: ptr(6)},
		},
		{
			// A sum or mean without one of its series would be a wrong
			// number: the signal is no value at all.
			name: "a rejected series voids its signal",
			in: `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} NaN
vllm:num_requests_waiting{engine="1",model_name="m"} 2
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} -1
vllm:num_requests_running{engine="1",model_name="m"} 3
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} +Inf
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 1.5
vllm:kv_cache_usage_perc{engine="2",model_name="m"} 0.75
`,
			want: want{
				dialect: VLLM, model: "m",
				rejected: []string{
					`vllm:num_requests_waiting{engine="0",model_name="m"}: queue_depth: not a finite number: NaN`,
					`vllm:num_requests_running{engine="0",model_name="m"}: requests_running: outside the physical range: -1`,
					`vllm:kv_cache_usage_perc{engine="0",model_name="m"}: kv_cache_utilization: not a finite number: +Inf`,
					`kv_cache_utilization: outside the physical range: 150`,
				},
			},
		},
		{
			name: "queue of 1e16",
			in: `vllm:num_requests_waiting{model_name="m"} 1e16
vllm:num_requests_running{model_name="m"} 4
`,
			want: want{dialect: VLLM, model: "m", running: ptr(4), rejected: []string{"queue_depth: outside the physical range: 1e+16"}},
		},
		{
			name: "a sum of values in range out of range",
			in: `vllm:num_requests_waiting{engine="0",model_name="m"} 1073741824
vllm:num_requests_waiting{engine="1",model_name="m"} 1073741824
vllm:num_requests_running{model_name="m"} 4
`,
			want: want{dialect: VLLM, model: "m", running: ptr(4),
				rejected: []string{"vllm:num_requests_waiting over 2 series: queue_depth: outside the physical range: 2.147483648e+09"}},
		},
		{
			name: "a series of the wrong type",
			in: `# TYPE sglang:num_queue_reqs summary
sglang:num_queue_reqs{model_name="m",quantile="0.5"} 1
sglang:num_queue_reqs_count{model_name="m"} 1
sglang:num_queue_reqs_sum{model_name="m"} 1
`,
			want: want{dialect: SGLang, rejected: []string{"not a gauge: a SUMMARY"}},
		},
		{
			name: "malformed TTFT histogram voids TTFT",
			in: `# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{model_name="m",le="1"} 4
sglang:time_to_first_token_seconds_bucket{model_name="m",le="0.5"} 5
sglang:time_to_first_token_seconds_count{model_name="m"} 5
`,
			want: want{dialect: SGLang, rejected: []string{"sglang:time_to_first_token_seconds{model_name=\"m\"}: invalid histogram: bound 1 (0.5) not above bound 0 (1)"}},
		},
		{
			// Merging the good engine's histogram alone would be a TTFT
			// of half the server.
			name: "negative le voids the merged TTFT",
			in: ttftTwoEngines + `vllm:time_to_first_token_seconds_bucket{engine="2",model_name="m",le="-5"} 4
vllm:time_to_first_token_seconds_bucket{engine="2",model_name="m",le="+Inf"} 4
vllm:time_to_first_token_seconds_count{engine="2",model_name="m"} 4
`,
			want: want{dialect: VLLM, model: "m", rejected: []string{`{engine="2",model_name="m"}: invalid histogram: negative bound le=-5`}},
		},
		{
			name: "decreasing cumulative counts",
			in: `# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="m",le="0.1"} 9
vllm:time_to_first_token_seconds_bucket{model_name="m",le="1"} 4
vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 10
vllm:time_to_first_token_seconds_count{model_name="m"} 10
`,
			want: want{dialect: VLLM, rejected: []string{"cumulative count 4 at le=1 below 9"}},
		},
		{
			name: "TTFT without TYPE line",
			in: `sglang:num_queue_reqs{model_name="m"} 1
sglang:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 4
`,
			want: want{dialect: SGLang, model: "m", queue: ptr(1), warnings: []string{"without a histogram TYPE line"}},
		},
		{
			name: "newer KV gauge preferred over the older one",
			in: `vllm:kv_cache_usage_perc{model_name="m"} 0.5
vllm:gpu_cache_usage_perc{model_name="m"} 0.9
`,
			want: want{dialect: VLLM, model: "m", kv: ptr(50)},
		},
		{
			name: "Triton's vLLM backend read as vLLM",
			in: `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model="llama3",version="1"} 3
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="llama3",version="1"} 1
`,
			want: want{dialect: VLLM, model: "llama3", running: ptr(3), warnings: []string{"triton metrics present too"}},
		},
		{
			name: "dialect without mapped series",
			in:   "vllm:cache_config_info{block_size=\"16\"} 1\n",
			want: want{dialect: VLLM},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Detect(text(t, tt.in))
			if err != nil {
				t.Fatal(err)
			}
			check(t, got, tt.want)
		})
	}
}

func TestDetectByModelSplits(t *testing.T) {
	got, err := DetectByModel(text(t, `vllm:num_requests_waiting{model_name="a"} 1
vllm:num_requests_waiting{model_name="b"} NaN
vllm:num_requests_running{model_name="b"} 2
`+ttftTwoEngines))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got models %v, want a, b and m", keys(got))
	}
	check(t, got["a"], want{dialect: VLLM, model: "a", queue: ptr(1)})
	check(t, got["b"], want{dialect: VLLM, model: "b", running: ptr(2), rejected: []string{"NaN"}})
	check(t, got["m"], want{dialect: VLLM, model: "m", ttft: &ttftWant{bounds: 3, count: 16, sum: 4, le: 0.1, leCount: 5}})

	empty, err := DetectByModel(text(t, "tgi_request_count 3\n"))
	if err != nil || len(empty) != 0 {
		t.Errorf("no mapped series: got %v, %v; want an empty map", keys(empty), err)
	}
}

func TestDetectUnknown(t *testing.T) {
	for name, in := range map[string]string{
		"node exporter": "# TYPE node_load1 gauge\nnode_load1 0.42\n",
		"nothing":       "",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Detect(text(t, in)); !errors.Is(err, ErrUnknownDialect) {
				t.Errorf("Detect: err = %v, want ErrUnknownDialect", err)
			}
			if _, err := DetectByModel(text(t, in)); !errors.Is(err, ErrUnknownDialect) {
				t.Errorf("DetectByModel: err = %v, want ErrUnknownDialect", err)
			}
		})
	}
}
