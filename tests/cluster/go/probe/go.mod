// Stampede test-cluster probe: a static HTTP/DNS checker used by the cluster smoke tests.
module stampede.test/cluster/probe

go 1.23.0
