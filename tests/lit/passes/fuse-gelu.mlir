// RUN: cpc-opt %s --pass-pipeline='builtin.module(func.func(cpc-fuse-gelu))' | FileCheck %s

// Tests that the torch export order x * 0.5 * (1 + erf(x / sqrt2)), i.e.
// (x * 0.5) * (1 + erf(x / 1.4142135)), becomes one exact cpc.gelu.
// CHECK-LABEL: func.func @half_first
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[G:.*]] = cpc.gelu %[[X]] : tensor<2x8xf32>
// CHECK-NEXT: return %[[G]] : tensor<2x8xf32>
func.func @half_first(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %sqrt2 = cpc.constant dense<1.41421354> : tensor<f32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %half = cpc.constant dense<0.5> : tensor<f32>
  %0 = cpc.div %x, %sqrt2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %1 = cpc.erf %0 : tensor<2x8xf32>
  %2 = cpc.add %1, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %3 = cpc.mul %x, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %4 = cpc.mul %3, %2 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %4 : tensor<2x8xf32>
}

// Tests that the order (x * (1 + erf(x / 1.4142135))) * 0.5 also fuses.
// CHECK-LABEL: func.func @half_last
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[G:.*]] = cpc.gelu %[[X]] : tensor<2x8xf32>
// CHECK-NEXT: return %[[G]] : tensor<2x8xf32>
func.func @half_last(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %sqrt2 = cpc.constant dense<1.4142135> : tensor<f32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %half = cpc.constant dense<0.5> : tensor<f32>
  %0 = cpc.div %x, %sqrt2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %1 = cpc.erf %0 : tensor<2x8xf32>
  %2 = cpc.add %1, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %3 = cpc.mul %x, %2 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %4 = cpc.mul %3, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %4 : tensor<2x8xf32>
}

// Tests that commuted operands fuse: 0.5 * ((1 + erf(x / sqrt2)) * x) with the constants on
// the left.
// CHECK-LABEL: func.func @half_last_commuted
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[G:.*]] = cpc.gelu %[[X]] : tensor<2x8xf32>
// CHECK-NEXT: return %[[G]] : tensor<2x8xf32>
func.func @half_last_commuted(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %sqrt2 = cpc.constant dense<1.4142135> : tensor<f32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %half = cpc.constant dense<0.5> : tensor<f32>
  %0 = cpc.div %x, %sqrt2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %1 = cpc.erf %0 : tensor<2x8xf32>
  %2 = cpc.add %one, %1 : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %3 = cpc.mul %2, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %4 = cpc.mul %half, %3 : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %4 : tensor<2x8xf32>
}

// Tests that commuted operands fuse: (1 + erf(x / sqrt2)) * (0.5 * x).
// CHECK-LABEL: func.func @half_first_commuted
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[G:.*]] = cpc.gelu %[[X]] : tensor<2x8xf32>
// CHECK-NEXT: return %[[G]] : tensor<2x8xf32>
func.func @half_first_commuted(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %sqrt2 = cpc.constant dense<1.41421354> : tensor<f32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %half = cpc.constant dense<0.5> : tensor<f32>
  %0 = cpc.div %x, %sqrt2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %1 = cpc.erf %0 : tensor<2x8xf32>
  %2 = cpc.add %one, %1 : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %3 = cpc.mul %half, %x : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %4 = cpc.mul %2, %3 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %4 : tensor<2x8xf32>
}

// Tests that erf(x * 0.70710678) (multiplying by 1/sqrt2) is recognized too.
// CHECK-LABEL: func.func @mul_rsqrt2
// CHECK-SAME: (%[[X:.*]]: tensor<4x197x3072xf32>)
// CHECK-NEXT: %[[G:.*]] = cpc.gelu %[[X]] : tensor<4x197x3072xf32>
// CHECK-NEXT: return %[[G]] : tensor<4x197x3072xf32>
func.func @mul_rsqrt2(%x: tensor<4x197x3072xf32>) -> tensor<4x197x3072xf32> {
  %rsqrt2 = cpc.constant dense<0.70710678> : tensor<f32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %half = cpc.constant dense<0.5> : tensor<f32>
  %0 = cpc.mul %rsqrt2, %x : (tensor<f32>, tensor<4x197x3072xf32>) -> tensor<4x197x3072xf32>
  %1 = cpc.erf %0 : tensor<4x197x3072xf32>
  %2 = cpc.add %1, %one : (tensor<4x197x3072xf32>, tensor<f32>) -> tensor<4x197x3072xf32>
  %3 = cpc.mul %x, %half : (tensor<4x197x3072xf32>, tensor<f32>) -> tensor<4x197x3072xf32>
  %4 = cpc.mul %3, %2 : (tensor<4x197x3072xf32>, tensor<4x197x3072xf32>) -> tensor<4x197x3072xf32>
  return %4 : tensor<4x197x3072xf32>
}

// Tests that the GELU of an MLP's first linear layer fuses in place, its input being an op
// result, and the second linear layer consumes the gelu.
// CHECK-LABEL: func.func @mlp
// CHECK: %[[H:.*]] = cpc.matmul
// CHECK: %[[HB:.*]] = cpc.add %[[H]], %{{.*}} : (tensor<8x3072xf32>, tensor<3072xf32>) -> tensor<8x3072xf32>
// CHECK-NEXT: %[[G:.*]] = cpc.gelu %[[HB]] : tensor<8x3072xf32>
// CHECK-NEXT: cpc.matmul %[[G]], %{{.*}} : (tensor<8x3072xf32>, tensor<3072x768xf32>) -> tensor<8x768xf32>
// CHECK-NOT: cpc.erf
func.func @mlp(%x: tensor<8x768xf32>, %w1: tensor<768x3072xf32>, %b1: tensor<3072xf32>,
               %w2: tensor<3072x768xf32>) -> tensor<8x768xf32> {
  %sqrt2 = cpc.constant dense<1.41421354> : tensor<f32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %half = cpc.constant dense<0.5> : tensor<f32>
  %h = cpc.matmul %x, %w1 : (tensor<8x768xf32>, tensor<768x3072xf32>) -> tensor<8x3072xf32>
  %hb = cpc.add %h, %b1 : (tensor<8x3072xf32>, tensor<3072xf32>) -> tensor<8x3072xf32>
  %0 = cpc.div %hb, %sqrt2 : (tensor<8x3072xf32>, tensor<f32>) -> tensor<8x3072xf32>
  %1 = cpc.erf %0 : tensor<8x3072xf32>
  %2 = cpc.add %1, %one : (tensor<8x3072xf32>, tensor<f32>) -> tensor<8x3072xf32>
  %3 = cpc.mul %hb, %2 : (tensor<8x3072xf32>, tensor<8x3072xf32>) -> tensor<8x3072xf32>
  %4 = cpc.mul %3, %half : (tensor<8x3072xf32>, tensor<f32>) -> tensor<8x3072xf32>
  %y = cpc.matmul %4, %w2 : (tensor<8x3072xf32>, tensor<3072x768xf32>) -> tensor<8x768xf32>
  return %y : tensor<8x768xf32>
}

// Tests that a wrong outer constant (0.6 instead of 0.5) does NOT fuse.
// CHECK-LABEL: func.func @wrong_half
// CHECK-NOT: cpc.gelu
// CHECK: cpc.erf
// CHECK: cpc.mul
// CHECK: cpc.mul
// CHECK-NOT: cpc.gelu
// CHECK: return
func.func @wrong_half(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %sqrt2 = cpc.constant dense<1.41421354> : tensor<f32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %c = cpc.constant dense<0.6> : tensor<f32>
  %0 = cpc.div %x, %sqrt2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %1 = cpc.erf %0 : tensor<2x8xf32>
  %2 = cpc.add %1, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %3 = cpc.mul %x, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %4 = cpc.mul %3, %2 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %4 : tensor<2x8xf32>
}

// Tests that a wrong outer constant 0.6 in the other operand order does NOT fuse either.
// CHECK-LABEL: func.func @wrong_half_last
// CHECK-NOT: cpc.gelu
// CHECK: cpc.erf
// CHECK-NOT: cpc.gelu
// CHECK: return
func.func @wrong_half_last(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %sqrt2 = cpc.constant dense<1.4142135> : tensor<f32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %c = cpc.constant dense<0.6> : tensor<f32>
  %0 = cpc.div %x, %sqrt2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %1 = cpc.erf %0 : tensor<2x8xf32>
  %2 = cpc.add %1, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %3 = cpc.mul %x, %2 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %4 = cpc.mul %3, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %4 : tensor<2x8xf32>
}

// Tests that erf(x / 2) (not sqrt2) does NOT fuse.
// CHECK-LABEL: func.func @wrong_scale
// CHECK-NOT: cpc.gelu
// CHECK: cpc.erf
// CHECK-NOT: cpc.gelu
// CHECK: return
func.func @wrong_scale(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %two = cpc.constant dense<2.0> : tensor<f32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %half = cpc.constant dense<0.5> : tensor<f32>
  %0 = cpc.div %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %1 = cpc.erf %0 : tensor<2x8xf32>
  %2 = cpc.add %1, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %3 = cpc.mul %x, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %4 = cpc.mul %3, %2 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %4 : tensor<2x8xf32>
}

// Tests that the erf of a different value than the one multiplied does NOT fuse.
// CHECK-LABEL: func.func @different_inputs
// CHECK-NOT: cpc.gelu
// CHECK: cpc.erf
// CHECK-NOT: cpc.gelu
// CHECK: return
func.func @different_inputs(%x: tensor<2x8xf32>, %y: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %sqrt2 = cpc.constant dense<1.41421354> : tensor<f32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %half = cpc.constant dense<0.5> : tensor<f32>
  %0 = cpc.div %y, %sqrt2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %1 = cpc.erf %0 : tensor<2x8xf32>
  %2 = cpc.add %1, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %3 = cpc.mul %x, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %4 = cpc.mul %3, %2 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %4 : tensor<2x8xf32>
}

// Tests that a chain whose constants broadcast x to a bigger shape does NOT fuse (the gelu
// would have the wrong type).
// CHECK-LABEL: func.func @broadcasting_constant
// CHECK-NOT: cpc.gelu
// CHECK: cpc.erf
// CHECK-NOT: cpc.gelu
// CHECK: return
func.func @broadcasting_constant(%x: tensor<8xf32>) -> tensor<2x8xf32> {
  %sqrt2 = cpc.constant dense<1.41421354> : tensor<f32>
  %one = cpc.constant dense<1.0> : tensor<2x8xf32>
  %half = cpc.constant dense<0.5> : tensor<f32>
  %0 = cpc.div %x, %sqrt2 : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %1 = cpc.erf %0 : tensor<8xf32>
  %2 = cpc.add %1, %one : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %3 = cpc.mul %x, %half : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %4 = cpc.mul %3, %2 : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %4 : tensor<2x8xf32>
}

// Tests that the erf expansion in bf16, whose sqrt(2) rounds to 1.4140625, still fuses.
// CHECK-LABEL: func.func @gelu_bf16
// CHECK: cpc.gelu
// CHECK-NOT: cpc.erf
func.func @gelu_bf16(%x: tensor<4xbf16>) -> tensor<4xbf16> {
  %sqrt2 = cpc.constant dense<1.4140625> : tensor<bf16>
  %one = cpc.constant dense<1.0> : tensor<bf16>
  %half = cpc.constant dense<0.5> : tensor<bf16>
  %0 = cpc.div %x, %sqrt2 : (tensor<4xbf16>, tensor<bf16>) -> tensor<4xbf16>
  %1 = cpc.erf %0 : tensor<4xbf16>
  %2 = cpc.add %1, %one : (tensor<4xbf16>, tensor<bf16>) -> tensor<4xbf16>
  %3 = cpc.mul %x, %2 : (tensor<4xbf16>, tensor<4xbf16>) -> tensor<4xbf16>
  %4 = cpc.mul %3, %half : (tensor<4xbf16>, tensor<bf16>) -> tensor<4xbf16>
  return %4 : tensor<4xbf16>
}

// Tests that torch's tanh-approximate GELU (x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))),
// with the cube written x * (x * x)) becomes cpc.gelu with approximate = #cpc.gelu_approximation<tanh>.
// CHECK-LABEL: func.func @gelu_tanh
// CHECK: cpc.gelu %{{.*}} {approximate = #cpc.gelu_approximation<tanh>}
// CHECK-NOT: cpc.tanh
func.func @gelu_tanh(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %c = cpc.constant dense<0.044715> : tensor<f32>
  %s = cpc.constant dense<0.797884583> : tensor<f32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %half = cpc.constant dense<0.5> : tensor<f32>
  %0 = cpc.mul %x, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %1 = cpc.mul %x, %0 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %2 = cpc.mul %1, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %3 = cpc.add %x, %2 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %4 = cpc.mul %3, %s : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %5 = cpc.tanh %4 : tensor<2x8xf32>
  %6 = cpc.add %5, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %7 = cpc.mul %x, %6 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %8 = cpc.mul %7, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %8 : tensor<2x8xf32>
}

// Tests that a tanh expansion with the wrong cubic coefficient does not fuse.
// CHECK-LABEL: func.func @gelu_tanh_wrong_coefficient
// CHECK-NOT: cpc.gelu
// CHECK: return
func.func @gelu_tanh_wrong_coefficient(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %c = cpc.constant dense<0.05> : tensor<f32>
  %s = cpc.constant dense<0.797884583> : tensor<f32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %half = cpc.constant dense<0.5> : tensor<f32>
  %0 = cpc.mul %x, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %1 = cpc.mul %x, %0 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %2 = cpc.mul %1, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %3 = cpc.add %x, %2 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %4 = cpc.mul %3, %s : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %5 = cpc.tanh %4 : tensor<2x8xf32>
  %6 = cpc.add %5, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %7 = cpc.mul %x, %6 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %8 = cpc.mul %7, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %8 : tensor<2x8xf32>
}
