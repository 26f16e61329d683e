// Command pulumi-resource-kubernetes serves the Kubernetes provider of module
// github.com/pulumi/pulumi-kubernetes/provider/v4. Upstream's main embeds generated, git-ignored files; here
// tools/engine/build.sh generates them from the module's committed schema.json and terraform-mapping.json
// (as upstream's generate.go does: schema version set, both re-serialized) before `go build`.
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema-embed.json
var pulumiSchema []byte

//go:embed terraform-mapping-embed.json
var terraformMapping []byte

func main() {
	provider.Serve("kubernetes", version.Version, pulumiSchema, terraformMapping)
}
