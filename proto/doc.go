// Package cosi is the COSI driver protocol, version v1alpha2 (package cosi.v1alpha2): the Identity
// and Provisioner gRPC services a driver serves on its COSI_ENDPOINT socket, generated from
// cosi.proto. Read cosi.proto for each RPC's idempotency rule and error codes.
package cosi
