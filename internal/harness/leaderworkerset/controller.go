// Package leaderworkerset is a minimal stand-in for the LeaderWorkerSet
// controller (leaderworkerset.x-k8s.io/v1), for gpuscale's tests:
// LeaderWorkerSet's Go module is not served here. It works on the
// CustomResourceDefinition in crd.yaml, which has LeaderWorkerSet's API
// shape and scale subresource, so that the real HPA controller scales a
// LeaderWorkerSet-shaped target through /scale.
//
// What it does, as LeaderWorkerSet does: spec.replicas groups of
// leaderWorkerTemplate.size pods each, the leader <name>-<group> from the
// leader template (the worker template when unset) and the workers
// <name>-<group>-<worker> from the worker template, labelled with the
// set's name, the group index and the worker index (pkg/kube/podgroup); a
// scale-down removes whole groups; the status carries replicas,
// readyReplicas and hpaPodSelector (the leaders, whose metrics an HPA
// reads). What it leaves out: rollouts, restart policies, subgroups,
// startup policies, the headless service and a StatefulSet per group. It
// polls instead of watching: it is for a test's handful of pods.
package leaderworkerset

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuscale/gpuscale/pkg/kube/podgroup"
)

// CRD is the CustomResourceDefinition's manifest (crd.yaml).
//
//go:embed crd.yaml
var CRD []byte

// API coordinates of the CustomResourceDefinition.
const (
	Group      = "leaderworkerset.x-k8s.io"
	Version    = "v1"
	APIVersion = Group + "/" + Version
	Kind       = "LeaderWorkerSet"
	Resource   = "leaderworkersets"
	CRDName    = Resource + "." + Group
)

// LeaderWorkerSet is the part of the API the controller reads and writes.
type LeaderWorkerSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitempty"`
}

// Spec is LeaderWorkerSet's spec, less what the controller ignores.
type Spec struct {
	Replicas             *int32               `json:"replicas,omitempty"`
	LeaderWorkerTemplate LeaderWorkerTemplate `json:"leaderWorkerTemplate"`
}

// LeaderWorkerTemplate describes one group.
type LeaderWorkerTemplate struct {
	Size           *int32                  `json:"size,omitempty"`
	LeaderTemplate *corev1.PodTemplateSpec `json:"leaderTemplate,omitempty"`
	WorkerTemplate corev1.PodTemplateSpec  `json:"workerTemplate"`
}

// Status is LeaderWorkerSet's status, less its conditions.
type Status struct {
	Replicas       int32  `json:"replicas"`
	ReadyReplicas  int32  `json:"readyReplicas"`
	HPAPodSelector string `json:"hpaPodSelector,omitempty"`
}

// ScaleDownOrder says which groups a scale-down removes.
type ScaleDownOrder int

const (
	// HighestIndex removes the groups of the highest indexes, as
	// LeaderWorkerSet does (its leaders are a StatefulSet's pods).
	HighestIndex ScaleDownOrder = iota
	// DeletionCost removes the groups whose leaders carry the lowest
	// controller.kubernetes.io/pod-deletion-cost first (ties: the highest
	// index), as a ReplicaSet ranks its pods: what a group-aware
	// controller that honours gpuscale's costs would do.
	DeletionCost
)

// Controller reconciles the LeaderWorkerSets of one namespace.
type Controller struct {
	Client    kubernetes.Interface
	Namespace string
	Order     ScaleDownOrder
	// NodeOf, when set, pins worker w (0: the leader) of group g to a
	// node (spec.nodeName), bypassing the scheduler: a test fixes a
	// placement the scheduler would make only by chance.
	NodeOf func(g, w int) string
	// Interval is the polling period (default 250ms).
	Interval time.Duration
	Log      *slog.Logger
}

// Run reconciles every Interval until ctx ends. Errors are logged and
// retried at the next poll.
func (c *Controller) Run(ctx context.Context) {
	log := cmp.Or(c.Log, slog.New(slog.DiscardHandler))
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := c.Reconcile(ctx); err != nil && ctx.Err() == nil {
			log.Info("leaderworkerset: reconcile", "namespace", c.Namespace, "err", err)
		}
	}, cmp.Or(c.Interval, 250*time.Millisecond))
}

// Create creates lws in the controller's namespace.
func (c *Controller) Create(ctx context.Context, lws *LeaderWorkerSet) error {
	lws.APIVersion, lws.Kind = APIVersion, Kind
	body, err := json.Marshal(lws)
	if err != nil {
		return err
	}
	return c.rest().Post().AbsPath(c.path()).Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error()
}

// Get reads one LeaderWorkerSet.
func (c *Controller) Get(ctx context.Context, name string) (*LeaderWorkerSet, error) {
	raw, err := c.rest().Get().AbsPath(c.path(), name).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var out LeaderWorkerSet
	return &out, json.Unmarshal(raw, &out)
}

// Reconcile makes every LeaderWorkerSet's groups and status match its
// spec once.
func (c *Controller) Reconcile(ctx context.Context) error {
	raw, err := c.rest().Get().AbsPath(c.path()).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("list %s: %w", Resource, err)
	}
	var list struct {
		Items []LeaderWorkerSet `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("decode %s: %w", Resource, err)
	}
	var errs []error
	for i := range list.Items {
		if err := c.reconcile(ctx, &list.Items[i]); err != nil {
			errs = append(errs, fmt.Errorf("%s/%s: %w", c.Namespace, list.Items[i].Name, err))
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) reconcile(ctx context.Context, lws *LeaderWorkerSet) error {
	replicas := int(ptrOr(lws.Spec.Replicas, 1))
	size := int(ptrOr(lws.Spec.LeaderWorkerTemplate.Size, 1))
	sel := labels.SelectorFromSet(labels.Set{podgroup.SetLabel: lws.Name})
	l, err := c.Client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return err
	}
	groups := map[int][]*corev1.Pod{}
	for i := range l.Items {
		p := &l.Items[i]
		if g, ok := podgroup.Of(p); ok && p.DeletionTimestamp == nil {
			groups[g.Index] = append(groups[g.Index], p)
		}
	}
	var errs []error
	// Scale down: whole groups, in the configured order.
	if extra := len(groups) - replicas; extra > 0 {
		for _, g := range c.victims(groups, extra) {
			for _, p := range groups[g] {
				if err := c.Client.CoreV1().Pods(c.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, err)
				}
			}
			delete(groups, g)
		}
	}
	// Scale up at the lowest free indexes; recreate missing pods.
	target := slices.Sorted(maps.Keys(groups))
	for g := 0; len(target) < replicas; g++ {
		if _, ok := groups[g]; !ok {
			target = append(target, g)
			groups[g] = nil // counted; its pods show at the next poll
		}
	}
	for _, g := range target {
		have := map[string]bool{}
		for _, p := range groups[g] {
			have[p.Name] = true
		}
		for w := range size {
			if p := c.pod(lws, g, w); !have[p.Name] {
				if _, err := c.Client.CoreV1().Pods(c.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					errs = append(errs, err)
				}
			}
		}
	}
	errs = append(errs, c.updateStatus(ctx, lws, groups, size))
	return errors.Join(errs...)
}

// victims picks n groups to remove.
func (c *Controller) victims(groups map[int][]*corev1.Pod, n int) []int {
	idx := slices.Sorted(maps.Keys(groups))
	slices.Reverse(idx) // highest index first
	if c.Order == DeletionCost {
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(leaderCost(groups[a]), leaderCost(groups[b])) })
	}
	return idx[:n]
}

// leaderCost is the group leader's pod-deletion-cost (0 when unset or
// invalid, as the ReplicaSet controller reads it).
func leaderCost(pods []*corev1.Pod) int {
	for _, p := range pods {
		if podgroup.IsLeader(p) {
			v, err := strconv.ParseInt(p.Annotations["controller.kubernetes.io/pod-deletion-cost"], 10, 32)
			if err == nil {
				return int(v)
			}
		}
	}
	return 0
}

func (c *Controller) updateStatus(ctx context.Context, lws *LeaderWorkerSet, groups map[int][]*corev1.Pod, size int) error {
	st := Status{Replicas: int32(len(groups)), HPAPodSelector: HPAPodSelector(lws.Name)}
	for _, pods := range groups {
		ready := len(pods) == size
		for _, p := range pods {
			ready = ready && podReady(p)
		}
		if ready {
			st.ReadyReplicas++
		}
	}
	if st == lws.Status {
		return nil
	}
	body, err := json.Marshal(map[string]Status{"status": st})
	if err != nil {
		return err
	}
	return c.rest().Patch(types.MergePatchType).AbsPath(c.path(), lws.Name, "status").Body(body).Do(ctx).Error()
}

// HPAPodSelector selects the leaders of the set name: the selector its
// scale subresource gives an HPA.
func HPAPodSelector(name string) string {
	set, _ := labels.NewRequirement(podgroup.SetLabel, selection.Equals, []string{name})
	leader, _ := labels.NewRequirement(podgroup.WorkerIndexLabel, selection.Equals, []string{"0"})
	return labels.NewSelector().Add(*set, *leader).String()
}

// pod is worker w (0: the leader) of group g.
func (c *Controller) pod(lws *LeaderWorkerSet, g, w int) *corev1.Pod {
	tmpl := lws.Spec.LeaderWorkerTemplate.WorkerTemplate
	name := fmt.Sprintf("%s-%d", lws.Name, g)
	if w == 0 && lws.Spec.LeaderWorkerTemplate.LeaderTemplate != nil {
		tmpl = *lws.Spec.LeaderWorkerTemplate.LeaderTemplate
	}
	if w > 0 {
		name += fmt.Sprintf("-%d", w)
	}
	tmpl = *tmpl.DeepCopy()
	lbls := maps.Clone(tmpl.Labels)
	if lbls == nil {
		lbls = map[string]string{}
	}
	lbls[podgroup.SetLabel] = lws.Name
	lbls[podgroup.GroupIndexLabel] = strconv.Itoa(g)
	lbls[podgroup.WorkerIndexLabel] = strconv.Itoa(w)
	if c.NodeOf != nil {
		tmpl.Spec.NodeName = c.NodeOf(g, w)
	}
	controller := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: lbls, Annotations: tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: APIVersion, Kind: Kind, Name: lws.Name, UID: lws.UID, Controller: &controller}}},
		Spec: tmpl.Spec,
	}
}

func (c *Controller) rest() rest.Interface { return c.Client.Discovery().RESTClient() }

func (c *Controller) path() string {
	return "/apis/" + APIVersion + "/namespaces/" + c.Namespace + "/" + Resource
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}
