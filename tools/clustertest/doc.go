// Package clustertest holds the tests that run a whole cell as real
// chubbyd processes on loopback and break it: kill -9 of the master while
// clients work, checked by porcupine for linearizability and for exclusive
// locks never held twice.
package clustertest
