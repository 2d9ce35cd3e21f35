package jsonwatch

import (
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
)

// ListWatchFor is the ListWatch NewInformer gives the informers of obj's kind.
func ListWatchFor(cfg *rest.Config, obj runtime.Object) (*toolscache.ListWatch, error) {
	lists, watches, err := newRESTClients(cfg)
	if err != nil {
		return nil, err
	}
	return kinds[reflect.TypeOf(obj)].listWatch(lists, watches), nil
}
