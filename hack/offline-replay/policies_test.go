package main

import (
	"strings"
	"testing"
	"time"
)

func TestPolicyOptions(t *testing.T) {
	base := policyOptions{schedule: "37s:9", runningTarget: 16, objective: time.Second, window: time.Minute, maxReplicas: 18}
	tests := []struct {
		name       string
		policy     string
		edit       func(*policyOptions)
		wantTarget float64
		wantDown   time.Duration
		wantErr    string
	}{
		{name: "running-requests at the bench's target", policy: "running-requests", wantTarget: 16, wantDown: 300 * time.Second},
		{name: "running-requests at a swept target", policy: "running-requests", edit: func(o *policyOptions) { o.runningTarget = 17 }, wantTarget: 17, wantDown: 300 * time.Second},
		{name: "capacity with the recommended window", policy: "capacity", wantDown: time.Minute},
		{name: "capacity with a swept window", policy: "capacity", edit: func(o *policyOptions) { o.downWindow = 5 * time.Minute }, wantDown: 5 * time.Minute},
		{name: "a schedule without its count", policy: "schedule", edit: func(o *policyOptions) { o.schedule = "37s" }, wantErr: "want DURATION:N"},
		{name: "an unknown policy", policy: "queue-depth", wantErr: "unknown policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base
			if tt.edit != nil {
				tt.edit(&o)
			}
			p, b, err := policy(tt.policy, o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("policy(%q) error %v, want one containing %q", tt.policy, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("policy(%q): %v", tt.policy, err)
			}
			if b.DownWindow != tt.wantDown {
				t.Errorf("scale-down window %v, want %v", b.DownWindow, tt.wantDown)
			}
			if b.MaxReplicas != o.maxReplicas {
				t.Errorf("max replicas %d, want %d", b.MaxReplicas, o.maxReplicas)
			}
			if pa, ok := p.(podsAverage); ok && pa.target != tt.wantTarget {
				t.Errorf("target %v, want %v", pa.target, tt.wantTarget)
			}
		})
	}
}
