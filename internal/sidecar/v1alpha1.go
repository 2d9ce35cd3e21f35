package sidecar

import (
	"fmt"
	"strings"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// ParseProtocols parses a comma-separated list of API protocols (S3, Azure, GCS), the
// --v1alpha1-protocols flag.
func ParseProtocols(s string) ([]cosiproto.ObjectProtocol_Type, error) {
	var out []cosiproto.ObjectProtocol_Type
	for p := range strings.SplitSeq(s, ",") {
		rpc := rpcProtocol(cosiapi.Protocol(strings.TrimSpace(p)))
		if rpc == cosiproto.ObjectProtocol_UNKNOWN {
			return nil, fmt.Errorf("%q is not S3, Azure or GCS", p)
		}
		out = append(out, rpc)
	}
	return out, nil
}

// imported is the Provisioned condition's reason and message for an imported (static) Bucket. A
// v1alpha1 driver cannot look a bucket up, so nothing was checked: the reason
// (ReasonImportedUnverified) and the message say so, and that the first grant is where a missing
// bucket will show.
func imported(drv *driverclient.Client) (reason, msg string) {
	if drv.Protocol() == driverclient.ProtocolV1alpha1 {
		return cosiapi.ReasonImportedUnverified,
			"imported without a check: the driver speaks COSI v1alpha1, which cannot look a bucket up; " +
				"the first access grant shows whether it exists"
	}
	return cosiapi.ReasonProvisioned, "the bucket exists in the backend"
}
