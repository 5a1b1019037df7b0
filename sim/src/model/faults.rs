//! Switches that make the modelled server misbehave, one message at a time.

use ruststream_settlement::{Subject, Wildcard};

use crate::model::error::SimError;

/// What the next operations should suffer. Each switch counts down: it applies to the next
/// `n` matching operations, then the server behaves again. A dropped connection is
/// [`Server::disconnect`](crate::model::server::Server::disconnect).
#[derive(Debug, Default, Clone)]
pub struct Faults {
    lost_acks: usize,
    failing: Vec<(Wildcard, usize)>,
}

impl Faults {
    /// The next `n` acknowledgements (publishes to `$JS.ACK.` subjects) are lost on their way
    /// to the server: the consumer never sees them, nor does any subscriber, and the
    /// delivery is redelivered at its deadline. The journal records them as lost.
    pub fn lose_acks(&mut self, n: usize) -> &mut Self {
        self.lost_acks += n;
        self
    }

    /// The next `n` publishes to a subject that `subject` matches (a wildcard may be given)
    /// fail: the publisher gets [`SimError::PublishFailed`], and nothing is stored or sent.
    ///
    /// # Errors
    /// [`SimError::Subject`] for a subject NATS refuses.
    pub fn fail_publishes(&mut self, subject: &str, n: usize) -> Result<&mut Self, SimError> {
        let wildcard = Wildcard::new(subject).map_err(|e| SimError::Subject {
            subject: subject.to_owned(),
            reason: e.to_string(),
        })?;
        self.failing.push((wildcard, n));
        Ok(self)
    }

    /// Whether the next acknowledgement is lost, counting it.
    pub(crate) fn take_lost_ack(&mut self) -> bool {
        if self.lost_acks == 0 {
            return false;
        }
        self.lost_acks -= 1;
        true
    }

    /// Whether a publish to `subject` fails, counting it.
    pub(crate) fn take_publish_failure(&mut self, subject: &Subject) -> bool {
        let Some(entry) = self
            .failing
            .iter_mut()
            .find(|(w, n)| *n > 0 && w.matches(subject))
        else {
            return false;
        };
        entry.1 -= 1;
        self.failing.retain(|(_, n)| *n > 0);
        true
    }
}
