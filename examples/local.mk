# examples/: the main demo and small usage examples
