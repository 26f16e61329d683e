// Command gen-embed writes the provider's schema-embed.json (schema.json with its version set) and
// terraform-mapping-embed.json from the provider module's committed files, like upstream's generate.go.
// Usage: gen-embed <module dir> <out dir> <version>
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

func reserialize(in, out string, edit func(map[string]any)) error {
	raw, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if edit != nil {
		edit(doc)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: gen-embed <provider module dir> <out dir> <version>")
		os.Exit(2)
	}
	src := filepath.Join(os.Args[1], "cmd", "pulumi-resource-kubernetes")
	out, version := os.Args[2], os.Args[3]
	if err := reserialize(filepath.Join(src, "schema.json"), filepath.Join(out, "schema-embed.json"),
		func(d map[string]any) { d["version"] = version }); err != nil {
		fmt.Fprintln(os.Stderr, "gen-embed:", err)
		os.Exit(1)
	}
	if err := reserialize(filepath.Join(src, "terraform-mapping.json"),
		filepath.Join(out, "terraform-mapping-embed.json"), nil); err != nil {
		fmt.Fprintln(os.Stderr, "gen-embed:", err)
		os.Exit(1)
	}
}
