package app

import (
	"k8s.io/client-go/tools/cache"

	"github.com/gpuscale/gpuscale/pkg/adapter/gather"
	"github.com/gpuscale/gpuscale/pkg/kube/podslim"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/scaledown"
)

// podKeeps are the pod fields the running pipeline reads, each named by
// the package that reads them (pkg/kube/podslim): the informer cache holds
// nothing else.
func (o *Options) podKeeps() []podslim.Keep {
	keeps := []podslim.Keep{provider.KeepPodFields}
	if o.Source == SourceEmbedded {
		keeps = append(keeps, gather.KeepPodFields)
	}
	if o.ScaleDown.Enabled {
		keeps = append(keeps, scaledown.KeepPodFields(scaledown.Defaults().GPUResource))
	}
	return keeps
}

// podTransform is the pod informer's transform.
func (o *Options) podTransform() cache.TransformFunc {
	return podslim.Transform(o.podKeeps()...)
}
