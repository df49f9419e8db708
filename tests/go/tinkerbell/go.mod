module fleetd/tests/go/tinkerbell

go 1.22
