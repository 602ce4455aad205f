"""What tests share that is not a test: fakes of platforms and providers, a local Redis
Cluster, log readers."""
