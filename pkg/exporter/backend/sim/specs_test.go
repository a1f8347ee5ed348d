package sim

import (
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// TestPhysicsForEveryField walks gpu.Specs: every field has a law in
// physics, and a busy vGPU guest reports it.
func TestPhysicsForEveryField(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := New(Options{GPUs: 1, VGPU: true, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	util := 50.0
	if err := b.SetLoad("0", Load{Utilization: &util}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	rs, err := b.Collect(t.Context())
	if err != nil || len(rs) != 1 {
		t.Fatalf("Collect = %v, %v", rs, err)
	}
	for _, s := range gpu.Specs {
		if physics[s.Field] == nil {
			t.Errorf("field %s has no simulated physics: add its law to physics (physics.go)", s.Name)
			continue
		}
		if _, ok := rs[0].Get(s.Field); !ok {
			t.Errorf("field %s is absent from a busy vGPU guest's reading", s.Name)
		}
	}
}
