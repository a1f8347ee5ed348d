package simworld

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// outcomes counts what became of the requests a test sent.
type outcomes struct {
	mu                       sync.Mutex
	firsts, streams, dropped int
}

func (o *outcomes) follow() inferencesim.Follow {
	return inferencesim.Follow{
		FirstToken: func(time.Duration) { o.mu.Lock(); o.firsts++; o.mu.Unlock() },
		Aborted: func(streamed bool) {
			o.mu.Lock()
			defer o.mu.Unlock()
			if streamed {
				o.streams++
			} else {
				o.dropped++
			}
		},
	}
}

func (o *outcomes) get() (firsts, streams, dropped int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.firsts, o.streams, o.dropped
}

func withPreStopSleep(seconds int64) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: seconds}}}
	}
}

func withGrace(seconds int64) podOpt {
	return func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = &seconds }
}

func withArgs(args ...string) podOpt {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Args = args }
}

// TestDeletedPodTerminates: a deleted pod's server frees its address at
// once, then ends as its spec says: vLLM's default SIGTERM aborts what it
// holds; a preStop sleep, or --shutdown-timeout, lets it finish its
// streams within the grace period; the grace period's end aborts the
// rest. Every abort is counted, per stream, and the server's GPUs count
// as held until it stops. Pod durations are wall time, ten times longer
// on the World's clock, which runs ten times faster.
func TestDeletedPodTerminates(t *testing.T) {
	tests := []struct {
		name string
		opts []podOpt
		gen  int // tokens each request generates
		// allServed: every request finishes; else some are aborted, and
		// streams says some of those were cut mid-stream.
		allServed, streams bool
		// lingers: the server still runs (preStop sleep) after its last
		// request finished.
		lingers bool
	}{
		{name: "vLLM's default: SIGTERM aborts", gen: 200},
		{name: "preStop sleep covers the streams", opts: []podOpt{withPreStopSleep(60), withGrace(90)}, gen: 20, allServed: true, lingers: true},
		{name: "shutdown timeout drains, then exits", opts: []podOpt{withArgs("--model=m", "--shutdown-timeout", "60"), withGrace(90)}, gen: 20, allServed: true},
		{name: "grace period ends the drain", opts: []podOpt{withPreStopSleep(60), withGrace(1)}, gen: 2000, streams: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			const speedup = 10
			ip := podIP(7, i+1)
			opts := append([]podOpt{withLabels("app", "chat"), withGPUs(2)}, tt.opts...)
			tw := startWorldWith(t, func(o *Options) {
				o.Now = func() time.Time { return start.Add(speedup * time.Since(start)) }
				o.TimeScale = speedup
			}, node("n7", 8), pod("llm", "a", "n7", ip, InferenceImage, opts...))
			url := "http://" + ip + ":8000/healthz"
			eventually(t, 10*time.Second, "server up", func() error { _, err := httpClient.Get(url); return err })

			// Ten 4,000-token prompts take 2.5 s of prefill at 16,000
			// tokens/s (0.25 s of wall time), so most are queued at the
			// deletion.
			var got outcomes
			chat := labels.SelectorFromSet(labels.Set{"app": "chat"})
			for range 10 {
				if _, err := tw.SendFollow("llm", chat, inferencesim.Request{ContextTokens: 4000, GeneratedTokens: tt.gen}, got.follow()); err != nil {
					t.Fatal(err)
				}
			}
			if err := tw.client.CoreV1().Pods("llm").Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			eventually(t, 5*time.Second, "address freed", func() error { return refused(url) })

			if tt.lingers {
				eventually(t, 10*time.Second, "all ten finished in the preStop sleep", func() error {
					if c := tw.completed(t, "llm", "a"); c != 10 {
						return fmt.Errorf("%d finished", c)
					}
					return nil
				})
				if pods, gpus := tw.Terminating("llm"); pods != 1 || gpus != 2 {
					t.Errorf("Terminating = %d pods, %d GPUs during the preStop sleep; want 1, 2", pods, gpus)
				}
			} else {
				// Nothing here waits anywhere near the 60 s sleeps: a
				// server that stops has drained, or was cut.
				eventually(t, 10*time.Second, "the server stops", func() error {
					if pods, _ := tw.Terminating("llm"); pods != 0 {
						return errors.New("still terminating")
					}
					return nil
				})
			}
			if firsts, _, _ := got.get(); tt.allServed && firsts != 10 {
				t.Errorf("%d of 10 requests got a first token", firsts)
			}
			_, streams, dropped := got.get()
			counted := tw.Aborted("llm")
			if counted.Requests != streams+dropped || counted.Streams != streams {
				t.Errorf("World counted %+v aborted; the requests heard %d streams cut, %d dropped before streaming", counted, streams, dropped)
			}
			switch {
			case tt.allServed && counted.Requests != 0:
				t.Errorf("%d requests aborted; want every one served", counted.Requests)
			case !tt.allServed && counted.Requests == 0:
				t.Error("no request aborted; want the termination to cut some")
			case tt.streams && counted.Streams == 0:
				t.Error("no stream cut mid-way; want the grace period to end some")
			}
		})
	}
}

// completed is how many requests the pod's server finished, read from its
// exposition (the server is off the World's books once its pod is gone).
func (tw *testWorld) completed(t *testing.T, ns, name string) int {
	t.Helper()
	tw.mu.Lock()
	defer tw.mu.Unlock()
	for k, r := range tw.terminating {
		if k.Namespace == ns && k.Name == name {
			return int(r.srv.Stats().Completed)
		}
	}
	return -1
}

// TestDeletionGraceIsTheFirst: a pod's termination takes the grace period
// its deletion first gave it, not the 0 of kwok's own deletion once the pod
// is marked (which a sync after both reads); a deletion that starts at 0
// (kubectl delete --force) keeps it.
func TestDeletionGraceIsTheFirst(t *testing.T) {
	deleting := func(p *corev1.Pod, grace int64) *corev1.Pod {
		d := p.DeepCopy()
		now := metav1.Now()
		d.DeletionTimestamp, d.DeletionGracePeriodSeconds = &now, &grace
		return d
	}
	for _, tc := range []struct {
		name   string
		graces []int64 // the deletions, in turn
		want   time.Duration
	}{
		{"a drain, then kwok's", []int64{43, 0}, 43 * time.Second},
		{"forced", []int64{0}, 0},
		{"a drain alone", []int64{90}, 90 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &World{deletionGrace: map[podKey]time.Duration{}}
			running := pod("llm", "a", "n1", podIP(1, 1), InferenceImage, withGrace(90))
			prev := running
			for _, g := range tc.graces {
				next := deleting(running, g)
				w.noteDeletion(prev, next)
				prev = next
			}
			r := &inferenceRun{term: terminationOf(prev, &prev.Spec.Containers[0])}
			w.mu.Lock()
			got := w.terminationLocked(keyOf(prev), r, prev)
			w.mu.Unlock()
			if got.grace != tc.want {
				t.Errorf("grace %v, want %v", got.grace, tc.want)
			}
			if len(w.deletionGrace) != 0 {
				t.Errorf("the noted grace outlived its termination: %v", w.deletionGrace)
			}
		})
	}
}
