package inference

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestModelNamesAreBounded: what a server or router names is kept only
// within the bounds on model names. A series naming a model past
// MaxModelName is rejected with its signal (or, for a router, that
// model); a server whose names add up past MaxServerModelNames keeps its
// values but no name. (Each pod could keep megabytes of names before.)
func TestModelNamesAreBounded(t *testing.T) {
	long := strings.Repeat("m", MaxModelName+1)
	edge := strings.Repeat("m", MaxModelName)

	sig, err := Detect(parseString(t, fmt.Sprintf("vllm:num_requests_waiting{model_name=%q} 3\nvllm:num_requests_running{model_name=%q} 2\n", long, "ok")))
	if err != nil {
		t.Fatal(err)
	}
	if sig.QueueDepth != nil || sig.Running == nil || sig.Model != "ok" || len(sig.Rejected) != 1 || !errors.Is(sig.Rejected[0].Err, ErrModelName) {
		t.Errorf("a %d-byte name: queue %v, running %v, model %.40q, rejected %v", len(long), sig.QueueDepth, sig.Running, sig.Model, sig.Rejected)
	}

	sig, err = Detect(parseString(t, fmt.Sprintf("vllm:num_requests_waiting{model_name=%q} 3\n", edge)))
	if err != nil || sig.QueueDepth == nil || sig.Model != edge || len(sig.Rejected) != 0 {
		t.Errorf("a %d-byte name: %v, %+v", len(edge), err, sig)
	}

	var many strings.Builder
	for i := range 40 {
		fmt.Fprintf(&many, "vllm:num_requests_waiting{model_name=\"model-%02d-%s\"} 1\n", i, strings.Repeat("x", 30))
	}
	sig, err = Detect(parseString(t, many.String()))
	if err != nil {
		t.Fatal(err)
	}
	if sig.QueueDepth == nil || *sig.QueueDepth != 40 || sig.Model != "" || len(sig.Rejected) != 1 || !errors.Is(sig.Rejected[0].Err, ErrModelName) {
		t.Errorf("40 names of 39 bytes: queue %v, model %.40q (%d bytes), rejected %v", sig.QueueDepth, sig.Model, len(sig.Model), sig.Rejected)
	}

	r, err := DetectRouter(parseString(t, fmt.Sprintf("dynamo_frontend_queued_requests{model=%q} 5\ndynamo_frontend_queued_requests{model=\"llama\"} 2\n", long)))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Held) != 1 || r.Held["llama"] != 2 || len(r.Rejected) != 1 || !errors.Is(r.Rejected[0].Err, ErrModelName) {
		t.Errorf("a router naming a %d-byte model: held %d models, rejected %v", len(long), len(r.Held), r.Rejected)
	}
}
