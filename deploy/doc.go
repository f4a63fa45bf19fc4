// Package deploy holds what runs the broker and its agent hosts elsewhere
// than from a checkout: the container image (Dockerfile) and the
// Kubernetes manifests (kubernetes/). Its tests hold those files to what
// the broker reads and what a cluster admits.
package deploy
