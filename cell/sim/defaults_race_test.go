//go:build race

package sim

// defaultSeeds is how many seeds `go test -race` runs: the race detector
// slows the simulator several times over, and ./build.sh test runs the
// whole module under it.
const defaultSeeds = 500
