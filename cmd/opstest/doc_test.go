// Package opstest holds tests of operating a fleet from the command line:
// the real worker, arbiter and replay binaries, built once into a
// temporary directory, run against each other on 127.0.0.1.
package opstest
