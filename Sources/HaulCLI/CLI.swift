import Haul
