//go:build !race

package sim

// defaultSeeds is how many seeds `go test` runs (without -race).
const defaultSeeds = 1000
