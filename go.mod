module github.com/kube-cosi/cosi

go 1.26.0

require (
	github.com/kube-cosi/cosi/api v0.0.0
	github.com/kube-cosi/cosi/proto v0.0.0
)

replace (
	github.com/kube-cosi/cosi/api => ./api
	github.com/kube-cosi/cosi/proto => ./proto
)
