// The umbrella header and nothing else: what every program that includes it pays before its own
// code. What bench/compile/compile_time.sh times.
#include <sluice/sluice.hpp>

int main() { return 0; }
