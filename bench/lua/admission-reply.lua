-- A reply shaped like admission's (shared/money/lua/reserve.lua): an array of numbers from a script.
return {0, 60, 59, 1000, 100000, 99000, 1000, 0}
