//go:build !race

package bigtest

const race = false
