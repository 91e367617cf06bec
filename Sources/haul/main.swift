import HaulCLI
