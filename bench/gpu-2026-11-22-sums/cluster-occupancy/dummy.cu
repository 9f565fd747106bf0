extern "C" __global__ void __launch_bounds__(256, 1) dummy256() { extern __shared__ char s[]; if (threadIdx.x == 9999) s[0] = 1; }
extern "C" __global__ void __launch_bounds__(128, 2) dummy128() { extern __shared__ char s[]; if (threadIdx.x == 9999) s[0] = 1; }
