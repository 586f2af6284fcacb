//go:build race

package bigtest

const race = true
