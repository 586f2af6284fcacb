// Package sideeffects holds the test that importing croupier's packages
// changes nothing in the importing process: no flags on the global flag set,
// no goroutines, no codecs, loggers, HTTP clients or telemetry providers
// swapped. A service imports croupier next to its own flags and its own
// choices of those; each of them is the application's to make.
package sideeffects
