package main

import "fmt"

// baseMemoryArgs is the --base-memory a trainer's writer mount is given for a checkpoint of
// bytes bytes: room for one version and a quarter more (docs/operations.md, "The base in
// memory": the default, a sixteenth of the node's RAM and at most 8 GiB, is for models that
// fit it; an operator names the budget of a larger one). Figures whose checkpoint is larger
// than this VM's default (1.47 GiB of 23.5 GiB: figure 2's 2 GiB at full size) measure the
// writer as an operator who followed the docs runs it, and say so in their notes.
func baseMemoryArgs(bytes int64) []string {
	mib := (bytes + bytes/4 + 1<<20 - 1) >> 20
	return []string{"--base-memory", fmt.Sprintf("%dM", mib)}
}
