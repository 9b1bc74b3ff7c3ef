// RUN: cpc-opt %s --cpc-pipeline-stages=chunks=2 | FileCheck %s
// RUN: cpc-opt %s --cpc-pipeline-stages='chunks=2 split=fc2' | FileCheck %s --check-prefix=HAND
// RUN: not cpc-opt %s --cpc-pipeline-stages='chunks=2 split=nowhere' 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: cpc-opt %s --cpc-pipeline-stages='chunks=2 profile=%S/Inputs/slow-reduction-profile.json' | FileCheck %s --check-prefix=PROFILE
// RUN: not cpc-opt %s --cpc-pipeline-stages='chunks=2 profile=%S/nothere.json' 2>&1 | FileCheck %s --check-prefix=NOPROFILE
// RUN: cpc-opt %s --cpc-pipeline-stages='chunks=2 backward=true' | FileCheck %s --check-prefix=BACKWARD

// Tests that the cut balances the chunks' estimated time (each op the larger of its FLOPs at
// 40 GFLOP/s and its bytes at 4 GB/s: fc1 56 ns, act 32, fc2 46, loss 7; cutting before act
// gives 56 | 85 ns, after it 88 | 53), that only ops reading input data get a chunk (parameters
// are copied where used) and that the module records each chunk's costs and the bytes that
// cross into it.
// CHECK: module attributes {cpc.pipeline_chunks = [{boundary_bytes = 0 : i64, chunk = 0 : i64, first_op = "fc1", flops = 1.280000e+02 : f64, ops = 1 : i64, parameter_bytes = 128 : i64, seconds = 5.5999999999999999E-8 : f64, with_backward = false}, {boundary_bytes = 64 : i64, chunk = 1 : i64, first_op = "act", flops = 1.130000e+02 : f64, ops = 3 : i64, parameter_bytes = 96 : i64, seconds = 8.5000000000000007E-8 : f64, with_backward = false}]}
// CHECK: cpc.parameter @w1 : tensor<4x8xf32>
// CHECK: cpc.matmul %{{.*}}, %{{.*}} {cpc.stage = 0 : i64}
// CHECK: cpc.tanh %{{.*}} {cpc.stage = 1 : i64}
// CHECK: cpc.parameter @w2 : tensor<8x3xf32>
// CHECK: cpc.matmul %{{.*}}, %{{.*}} {cpc.stage = 1 : i64}

// Tests a cut named by hand: before the first op whose name contains "fc2".
// HAND: cpc.tanh %{{.*}} {cpc.stage = 0 : i64}
// HAND: cpc.matmul %{{.*}}, %{{.*}} {cpc.stage = 1 : i64}

// Tests that a cost profile (cpc calibrate) prices the ops: where its reduce_mean takes 28 us
// (its own rate, 1 MB/s over its 28 bytes), the loss alone is the slowest chunk whatever the
// cut, and among those equal cuts the one with the fewest bytes crossing (y, 24 B) wins.
// PROFILE: {boundary_bytes = 24 : i64, chunk = 1 : i64, first_op = "loss", {{.*}} seconds = 2.800000e-05 : f64, with_backward = false}
// PROFILE: cpc.matmul %{{.*}}, %{{.*}} {cpc.stage = 0 : i64} : (tensor<2x8xf32>, tensor<8x3xf32>)
// PROFILE: cpc.reduce_mean %{{.*}} {axes = array<i64: 0, 1>, cpc.stage = 1 : i64}
// Tests that with `backward` (training) each chunk is priced with its gradient ops: the tanh's
// gradient and the weight gradients make the first ops dearer, so the cut moves after act
// (the forward alone cuts before it), and the chunks record it.
// BACKWARD: {boundary_bytes = 0 : i64, chunk = 0 : i64, first_op = "fc1", {{.*}} ops = 2 : i64, {{.*}} with_backward = true}
// BACKWARD: cpc.tanh %{{.*}} {cpc.stage = 0 : i64}
// BACKWARD: cpc.matmul %{{.*}}, %{{.*}} {cpc.stage = 1 : i64}
// BACKWARD-NOT: _grad
// NOPROFILE: error: {{.*}}nothere.json: cannot read the cost profile

// Tests that a cut point no op matches is an error naming it.
// BAD: no op named like 'nowhere' to cut before
cpc.variable @w1 trainable : tensor<4x8xf32>
cpc.variable @w2 trainable : tensor<8x3xf32>
func.func @main(%x: tensor<2x4xf32> {cpc.name = "x"}) -> tensor<f32> {
  %w1 = cpc.parameter @w1 : tensor<4x8xf32>
  %h = cpc.matmul %x, %w1 : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32> loc("fc1")
  %a = cpc.tanh %h : tensor<2x8xf32> loc("act")
  %w2 = cpc.parameter @w2 : tensor<8x3xf32>
  %y = cpc.matmul %a, %w2 : (tensor<2x8xf32>, tensor<8x3xf32>) -> tensor<2x3xf32> loc("fc2")
  %l = cpc.reduce_mean %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x3xf32> -> tensor<f32> loc("loss")
  return %l : tensor<f32>
}
